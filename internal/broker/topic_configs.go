package broker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/partition"
)

// brokerDefaults checks the broker's topic defaults and adds the segment
// size of Config.Log as segment.bytes unless one is given.
func brokerDefaults(cfg Config) (map[string]string, error) {
	out := maps.Clone(cfg.TopicDefaults)
	if out == nil {
		out = map[string]string{}
	}
	if _, ok := out["segment.bytes"]; !ok && cfg.Log.SegmentBytes > 0 && cfg.Log.SegmentBytes != partition.DefaultSegmentBytes {
		out["segment.bytes"] = strconv.FormatInt(cfg.Log.SegmentBytes, 10)
	}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		d, ok := LookupConfig(name)
		if !ok || d.BrokerName == "" {
			return nil, fmt.Errorf("broker default for %q: not a topic config with a broker default", name)
		}
		v := out[name]
		if err := ValidateConfig(name, &v); err != nil {
			return nil, fmt.Errorf("broker default %s (%s): %w", d.BrokerName, name, err)
		}
	}
	return out, nil
}

// logConfigOf is the log settings of a topic with the given overrides.
func (b *Broker) logConfigOf(overrides map[string]string) partition.Config {
	return logConfig(resolveConfigs(overrides, b.cfg.TopicDefaults))
}

// warnUnknownConfigs logs the stored configs of t that are not topic
// configs (accepted before configs were checked): they are kept, and
// ignored.
func (b *Broker) warnUnknownConfigs(t *Topic) {
	for _, name := range slices.Sorted(maps.Keys(t.Configs())) {
		if _, ok := LookupConfig(name); !ok {
			b.log.Warn("ignoring a stored config that is not a topic config", "topic", t.Name, "config", name)
		}
	}
}

// TopicConfigs returns every config of the named topic with its value and
// source, sorted by name.
func (b *Broker) TopicConfigs(name string) ([]ConfigValue, error) {
	if name == OffsetsTopicName && b.offsetsCreated.Load() {
		return resolveConfigs(offsetsTopicConfigs, b.cfg.TopicDefaults), nil
	}
	t, ok := b.Topic(name)
	if !ok {
		return nil, kerr.UnknownTopicOrPartition
	}
	return resolveConfigs(t.Configs(), b.cfg.TopicDefaults), nil
}

// ResolveConfigs returns every config of a topic with the given overrides
// (which must be valid), with its value and source, sorted by name.
func (b *Broker) ResolveConfigs(overrides map[string]string) ([]ConfigValue, error) {
	if err := ValidateConfigs(overrides); err != nil {
		return nil, err
	}
	return resolveConfigs(overrides, b.cfg.TopicDefaults), nil
}

// BrokerConfigs returns the broker's topic defaults: every topic config
// that has a broker synonym, under the broker's name, with the flag's
// value (STATIC_BROKER_CONFIG) or groupd's default.
func (b *Broker) BrokerConfigs() []Synonym {
	var out []Synonym
	for _, d := range configDefs {
		if d.BrokerName == "" {
			continue
		}
		s := Synonym{Name: d.BrokerName, Value: d.Default, Source: kmsg.ConfigSourceDefaultConfig}
		if v, ok := b.cfg.TopicDefaults[d.Name]; ok {
			s.Value, s.Source = v, kmsg.ConfigSourceStaticBrokerConfig
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Synonym) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b Synonym) bool { return a.Name == b.Name })
}

// SetTopicConfigs replaces the configs set on a topic with configs (the
// broker defaults apply to every config not named), durably, and applies
// them to its partitions. With validateOnly nothing changes. Errors are
// *kerr.Error values, INVALID_CONFIG with a message for a bad config.
func (b *Broker) SetTopicConfigs(name string, configs map[string]string, validateOnly bool) error {
	if name == OffsetsTopicName {
		if b.offsetsCreated.Load() {
			return errInternalTopic("its configs are fixed")
		}
		return kerr.UnknownTopicOrPartition
	}
	if err := ValidateConfigs(configs); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	if validateOnly {
		return nil
	}
	old := t.Configs()
	t.setConfigs(maps.Clone(configs))
	if err := b.persistLocked(); err != nil {
		t.setConfigs(old)
		return err
	}
	// meta.json is the source of truth; a stale descriptor is rewritten
	// on the next start.
	if err := writeDescriptor(b.topicDir(t), b.descriptorOf(t, int32(len(t.Partitions())))); err != nil {
		b.log.Warn("writing the topic descriptor; the next start rewrites it", "topic", name, "err", err)
	}
	c := b.logConfigOf(t.Configs())
	for _, l := range t.Partitions() {
		l.SetConfig(c)
	}
	b.log.Info("set topic configs", "topic", name, "configs", fmt.Sprint(configs))
	return nil
}
