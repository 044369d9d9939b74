package api

import (
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
	if _, ok := h.b.Topic(name); ok {
		return nil
	}
	if _, ok := h.b.OffsetsTopic(); ok && name == broker.OffsetsTopicName {
		return nil
	}
	return detail(kerr.UnknownTopicOrPartition, "topic %q does not exist", name)
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
