package api

import (
	"context"
	"maps"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
)

// Shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs:
// topics are the resources whose configs change; the broker's own are
// its flags, described and read-only.

// resourceKey names a config resource, to find the ones a request names
// twice, which Kafka refuses every copy of.
func resourceKey(t kmsg.ConfigResourceType, name string) string {
	return strconv.Itoa(int(t)) + "/" + name
}

// checkTopicResource resolves a topic resource's name, or says why not.
func (h *Handler) checkTopicResource(name string) error {
	if err := broker.ValidateTopicName(name); err != nil {
		return detail(kerr.InvalidTopicException, "topic name %q is not valid", name)
	}
	if h.cl != nil {
		if _, ok := h.cl.Node.View().Topic(name); ok {
			return nil
		}
		return detail(kerr.UnknownTopicOrPartition, "topic %q does not exist", name)
	}
	if _, ok := h.b.Topic(name); ok {
		return nil
	}
	if _, ok := h.b.OffsetsTopic(); ok && name == broker.OffsetsTopicName {
		return nil
	}
	return detail(kerr.UnknownTopicOrPartition, "topic %q does not exist", name)
}

// topicConfigValues is every config of a topic with its value and where
// it comes from. The configs set on a topic are the broker's in single-node
// mode and the topic's in etcd in cluster mode, where every node answers
// the same.
func (h *Handler) topicConfigValues(name string) ([]broker.ConfigValue, error) {
	if h.cl == nil {
		return h.b.TopicConfigs(name)
	}
	t, ok := h.cl.Node.View().Topic(name)
	if !ok {
		return nil, kerr.UnknownTopicOrPartition
	}
	return h.b.ResolveConfigs(t.Configs)
}

// setTopicConfigs replaces the configs set on a topic with what change
// makes of the current ones. In cluster mode the change is a
// compare-and-swap on the topic in etcd, decided again if the topic
// changed meanwhile, and every node applies it to its replicas as it
// sees it.
func (h *Handler) setTopicConfigs(ctx context.Context, name string, validateOnly bool, change func(map[string]string) (map[string]string, error)) error {
	if h.cl == nil {
		var current map[string]string
		if t, ok := h.b.Topic(name); ok {
			current = maps.Clone(t.Configs())
		}
		configs, err := change(current)
		if err != nil {
			return err
		}
		return h.b.SetTopicConfigs(name, configs, validateOnly)
	}
	if name == broker.OffsetsTopicName {
		return detail(kerr.InvalidRequest, "%s is an internal topic: its configs are fixed", name)
	}
	validated := func(current map[string]string) (map[string]string, error) {
		configs, err := change(current)
		if err == nil {
			err = broker.ValidateConfigs(configs)
		}
		return configs, err
	}
	if validateOnly {
		t, ok := h.cl.Node.View().Topic(name)
		if !ok {
			return kerr.UnknownTopicOrPartition
		}
		_, err := validated(maps.Clone(t.Configs))
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	return h.cl.Node.UpdateTopicConfigs(ctx, name, validated)
}

// brokerResource checks that a broker resource names this broker (or is
// "", the cluster-wide default).
func (h *Handler) brokerResource(name string) error {
	if name != "" && name != strconv.Itoa(int(h.b.NodeID())) {
		return detail(kerr.InvalidRequest, "unexpected broker id %q: this cluster's one broker is %d", name, h.b.NodeID())
	}
	return nil
}

// refuseAlter is the answer to a request to change the configs of a
// resource other than a topic: the broker's are its flags, fixed at start.
func (h *Handler) refuseAlter(t kmsg.ConfigResourceType, name string) error {
	if t != kmsg.ConfigResourceTypeBroker {
		return unsupportedResource(t)
	}
	if err := h.brokerResource(name); err != nil {
		return err
	}
	return detail(kerr.InvalidRequest, "broker configs are set by flags when groupd starts")
}

func unsupportedResource(t kmsg.ConfigResourceType) error {
	return detail(kerr.InvalidRequest, "configs of resource type %s are not served; topics (2) and the broker (4) are", t)
}
