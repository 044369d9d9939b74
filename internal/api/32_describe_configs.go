package api

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.DescribeConfigs, 0, 4, (*Handler).describeConfigs) }

// describeConfigs answers a topic with every topic config, its value and
// where it comes from (the topic, a broker flag, or the default), with
// synonyms and documentation when asked; the broker with its topic
// defaults, read-only.
func (h *Handler) describeConfigs(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		res.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		wanted := func(name string) bool { return rr.ConfigNames == nil || slices.Contains(rr.ConfigNames, name) }
		var err error
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			var values []broker.ConfigValue
			if err = h.checkTopicResource(rr.ResourceName); err == nil {
				values, err = h.topicConfigValues(rr.ResourceName)
			}
			for _, v := range values {
				if !wanted(v.Def.Name) {
					continue
				}
				c := describedConfig(req, v.Def, v.Value, v.Source, false)
				if req.IncludeSynonyms {
					for _, s := range v.Synonyms {
						syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
						syn.Name, syn.Value, syn.Source = s.Name, strp(s.Value), s.Source
						c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
					}
				}
				res.Configs = append(res.Configs, c)
			}
		case kmsg.ConfigResourceTypeBroker:
			// "" is the cluster-wide default, which holds nothing: every
			// broker config is set by a flag at start.
			if err = h.brokerResource(rr.ResourceName); err == nil && rr.ResourceName != "" {
				for _, s := range h.b.BrokerConfigs() {
					if !wanted(s.Name) {
						continue
					}
					def := brokerSynonymDef(s.Name)
					c := describedConfig(req, def, s.Value, s.Source, true)
					if req.IncludeSynonyms {
						syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
						syn.Name, syn.Value, syn.Source = s.Name, strp(s.Value), s.Source
						c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
					}
					res.Configs = append(res.Configs, c)
				}
			}
		default:
			err = unsupportedResource(rr.ResourceType)
		}
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
			res.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		}
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

func describedConfig(req *kmsg.DescribeConfigsRequest, def broker.ConfigDef, value string, source kmsg.ConfigSource, readOnly bool) kmsg.DescribeConfigsResponseResourceConfig {
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name = def.Name
	c.Value = strp(value)
	c.ReadOnly = readOnly
	c.Source = source
	c.IsDefault = source == kmsg.ConfigSourceDefaultConfig
	c.ConfigType = def.Type
	c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{}
	if req.IncludeDocumentation {
		c.Documentation = strp(def.Doc)
	}
	return c
}

// brokerSynonymDef is the definition a broker config shares with the topic
// config it is the default of, under the broker's name.
func brokerSynonymDef(name string) broker.ConfigDef {
	for _, d := range broker.ConfigDefs() {
		if d.BrokerName == name {
			d.Name = name
			return d
		}
	}
	return broker.ConfigDef{Name: name}
}
