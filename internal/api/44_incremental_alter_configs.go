package api

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/server"
)

func init() {
	register(kmsg.IncrementalAlterConfigs, 0, 1, (*Handler).incrementalAlterConfigs)
}

// incrementalAlterConfigs changes the named configs of a topic and leaves
// the others: SET gives a value, DELETE returns a config to the broker's
// default, APPEND and SUBTRACT add or remove values of a list config
// (cleanup.policy) from its current value.
func (h *Handler) incrementalAlterConfigs(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	seen := map[string]int{}
	for _, rr := range req.Resources {
		seen[resourceKey(rr.ResourceType, rr.ResourceName)]++
	}
	for _, rr := range req.Resources {
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		switch {
		case seen[resourceKey(rr.ResourceType, rr.ResourceName)] > 1:
			err = detail(kerr.InvalidRequest, "resource %q is named more than once in the request", rr.ResourceName)
		case rr.ResourceType == kmsg.ConfigResourceTypeTopic:
			if err = h.checkTopicResource(rr.ResourceName); err == nil {
				err = h.setTopicConfigs(ctx, rr.ResourceName, req.ValidateOnly, func(current map[string]string) (map[string]string, error) {
					return h.incrementedConfigs(rr, current)
				})
			}
		default:
			err = h.refuseAlter(rr.ResourceType, rr.ResourceName)
		}
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
		}
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

// incrementedConfigs applies a resource's operations to the configs set
// on the topic, configs (which it may change).
func (h *Handler) incrementedConfigs(rr kmsg.IncrementalAlterConfigsRequestResource, configs map[string]string) (map[string]string, error) {
	names := map[string]bool{}
	for _, c := range rr.Configs {
		if names[c.Name] {
			return nil, detail(kerr.InvalidRequest, "error due to duplicate config keys: %s", c.Name)
		}
		names[c.Name] = true
	}
	values, err := h.topicConfigValues(rr.ResourceName)
	if err != nil {
		return nil, err
	}
	if configs == nil {
		configs = map[string]string{}
	}
	current := func(name string) string {
		if v, ok := configs[name]; ok {
			return v
		}
		for _, v := range values {
			if v.Def.Name == name {
				return v.Value
			}
		}
		return ""
	}
	for _, c := range rr.Configs {
		def, ok := broker.LookupConfig(c.Name)
		if !ok {
			return nil, detail(kerr.InvalidConfig, "unknown topic config name: %s", c.Name)
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return nil, detail(kerr.InvalidConfig, "null value not supported for topic config: %s", c.Name)
			}
			configs[c.Name] = *c.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(configs, c.Name)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if def.Type != kmsg.ConfigTypeList {
				return nil, detail(kerr.InvalidConfig, "config value %s is not allowed for config key %s, which is not a list", strings.ToLower(c.Op.String()), c.Name)
			}
			if c.Value == nil {
				return nil, detail(kerr.InvalidConfig, "null value not supported for topic config: %s", c.Name)
			}
			list := broker.SplitList(current(c.Name))
			for _, v := range broker.SplitList(*c.Value) {
				if c.Op == kmsg.IncrementalAlterConfigOpAppend && !slices.Contains(list, v) {
					list = append(list, v)
				}
				if c.Op == kmsg.IncrementalAlterConfigOpSubtract {
					list = slices.DeleteFunc(list, func(x string) bool { return x == v })
				}
			}
			configs[c.Name] = strings.Join(list, ",")
		default:
			return nil, detail(kerr.InvalidRequest, "unknown operation %d on config %s", c.Op, c.Name)
		}
	}
	return configs, nil
}
