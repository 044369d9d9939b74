package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.AlterConfigs, 0, 2, (*Handler).alterConfigs) }

// alterConfigs replaces a topic's configs with those given: the ones not
// named go back to the broker's defaults, as Kafka's (non-incremental)
// AlterConfigs does.
func (h *Handler) alterConfigs(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	seen := map[string]int{}
	for _, rr := range req.Resources {
		seen[resourceKey(rr.ResourceType, rr.ResourceName)]++
	}
	for _, rr := range req.Resources {
		res := kmsg.NewAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		switch {
		case seen[resourceKey(rr.ResourceType, rr.ResourceName)] > 1:
			err = detail(kerr.InvalidRequest, "resource %q is named more than once in the request", rr.ResourceName)
		case rr.ResourceType == kmsg.ConfigResourceTypeTopic:
			configs := make(map[string]string, len(rr.Configs))
			for _, c := range rr.Configs {
				if _, dup := configs[c.Name]; dup {
					err = detail(kerr.InvalidRequest, "config %q is named more than once", c.Name)
					break
				}
				if c.Value == nil {
					err = detail(kerr.InvalidConfig, "null value not supported for topic config: %s", c.Name)
					break
				}
				configs[c.Name] = *c.Value
			}
			if err == nil {
				err = h.checkTopicResource(rr.ResourceName)
			}
			if err == nil {
				err = h.setTopicConfigs(ctx, rr.ResourceName, req.ValidateOnly, func(map[string]string) (map[string]string, error) { return configs, nil })
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
