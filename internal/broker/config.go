package broker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/partition"
)

// Topic configs, as Kafka defines them (LogConfig): every name Kafka knows
// for a topic is accepted, checked against its type and range, stored
// with the topic and described; the ones that act on a single node's log
// are applied (see Applied). An unknown name or a bad value is Kafka's
// INVALID_CONFIG with a message.

// ConfigDef describes one topic config.
type ConfigDef struct {
	Name string
	Type kmsg.ConfigType
	// Default is groupd's default, which is Kafka's except where noted.
	Default string
	// BrokerName is the broker config that sets the default for every
	// topic (Kafka's synonym), "" if none.
	BrokerName string
	// Applied is set for the configs groupd acts on; the others are kept
	// and described only (replication, tiered storage, flushes by count,
	// compression levels and the like have no effect on one node here).
	Applied bool
	Doc     string
	check   func(string) error
}

func atLeast(min int64) func(int64) error {
	return func(v int64) error {
		if v < min {
			return fmt.Errorf("value must be at least %d", min)
		}
		return nil
	}
}

func between(lo, hi int64) func(int64) error {
	return func(v int64) error {
		if v < lo || v > hi {
			return fmt.Errorf("value must be between %d and %d", lo, hi)
		}
		return nil
	}
}

func intDef(name string, typ kmsg.ConfigType, def, broker string, applied bool, doc string, rng func(int64) error) ConfigDef {
	bits := 64
	if typ == kmsg.ConfigTypeInt {
		bits = 32
	}
	return ConfigDef{Name: name, Type: typ, Default: def, BrokerName: broker, Applied: applied, Doc: doc, check: func(s string) error {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
		if err != nil {
			return fmt.Errorf("expected a %d-bit integer", bits)
		}
		if rng != nil {
			return rng(v)
		}
		return nil
	}}
}

func oneOf(name, def, broker string, applied bool, doc string, values ...string) ConfigDef {
	return ConfigDef{Name: name, Type: kmsg.ConfigTypeString, Default: def, BrokerName: broker, Applied: applied, Doc: doc, check: func(s string) error {
		if !slices.Contains(values, strings.TrimSpace(s)) {
			return fmt.Errorf("string must be one of: %s", strings.Join(values, ", "))
		}
		return nil
	}}
}

func boolDef(name, def, broker, doc string, allowTrue bool) ConfigDef {
	return ConfigDef{Name: name, Type: kmsg.ConfigTypeBoolean, Default: def, BrokerName: broker, Doc: doc, check: func(s string) error {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "false":
			return nil
		case "true":
			if !allowTrue {
				return fmt.Errorf("not supported on this broker")
			}
			return nil
		}
		return fmt.Errorf("expected true or false")
	}}
}

func listDef(name, def, broker string, applied bool, doc string, check func([]string) error) ConfigDef {
	return ConfigDef{Name: name, Type: kmsg.ConfigTypeList, Default: def, BrokerName: broker, Applied: applied, Doc: doc, check: func(s string) error {
		return check(SplitList(s))
	}}
}

// SplitList splits a list config's value at commas, trimming spaces and
// dropping empty items, as Kafka reads LIST configs.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// maxLong is Java's Long.MAX_VALUE, the default of the configs without a limit.
const maxLong = "9223372036854775807"

// configDefs are the topic configs, sorted by name.
var configDefs = []ConfigDef{
	listDef("cleanup.policy", "delete", "log.cleanup.policy", true,
		"delete: old segments are deleted by retention.ms and retention.bytes; compact: the cleaner keeps the last record of each key", func(vs []string) error {
			if len(vs) == 0 {
				return fmt.Errorf("must be delete, compact or both")
			}
			for _, v := range vs {
				if v != "delete" && v != "compact" {
					return fmt.Errorf("unknown policy %q: must be delete, compact or both", v)
				}
			}
			return nil
		}),
	intDef("compression.gzip.level", kmsg.ConfigTypeInt, "-1", "compression.gzip.level", false, "gzip level when the broker compresses", func(v int64) error {
		if v != -1 && (v < 1 || v > 9) {
			return fmt.Errorf("value must be -1 or between 1 and 9")
		}
		return nil
	}),
	intDef("compression.lz4.level", kmsg.ConfigTypeInt, "9", "compression.lz4.level", false, "lz4 level when the broker compresses", between(1, 17)),
	oneOf("compression.type", "producer", "compression.type", false, "batches are stored as the producer compressed them",
		"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
	intDef("compression.zstd.level", kmsg.ConfigTypeInt, "3", "compression.zstd.level", false, "zstd level when the broker compresses", between(-131072, 22)),
	intDef("delete.retention.ms", kmsg.ConfigTypeLong, "86400000", "log.cleaner.delete.retention.ms", true,
		"how long a tombstone stays readable after the cleaner first kept it", atLeast(0)),
	intDef("file.delete.delay.ms", kmsg.ConfigTypeLong, "60000", "log.segment.delete.delay.ms", false, "kept for compatibility; deleted segments stay open a minute for readers", atLeast(0)),
	intDef("flush.messages", kmsg.ConfigTypeLong, maxLong, "log.flush.interval.messages", false, "see --fsync", atLeast(1)),
	intDef("flush.ms", kmsg.ConfigTypeLong, maxLong, "log.flush.interval.ms", false, "see --fsync", atLeast(0)),
	{Name: "follower.replication.throttled.replicas", Type: kmsg.ConfigTypeList, Doc: "no replicas on one node", check: func(string) error { return nil }},
	intDef("index.interval.bytes", kmsg.ConfigTypeInt, "4096", "log.index.interval.bytes", false, "bytes between sparse index entries (groupd uses 4096 for every topic)", atLeast(0)),
	{Name: "leader.replication.throttled.replicas", Type: kmsg.ConfigTypeList, Doc: "no replicas on one node", check: func(string) error { return nil }},
	intDef("local.retention.bytes", kmsg.ConfigTypeLong, "-2", "log.local.retention.bytes", false, "tiered storage is not served", atLeast(-2)),
	intDef("local.retention.ms", kmsg.ConfigTypeLong, "-2", "log.local.retention.ms", false, "tiered storage is not served", atLeast(-2)),
	intDef("max.compaction.lag.ms", kmsg.ConfigTypeLong, maxLong, "log.cleaner.max.compaction.lag.ms", true,
		"a compacted log is cleaned once its oldest uncleaned record is this old, however little of it is dirty", atLeast(1)),
	intDef("max.message.bytes", kmsg.ConfigTypeInt, "1048588", "message.max.bytes", true,
		"the largest record batch a producer may append (MESSAGE_TOO_LARGE above it)", atLeast(0)),
	intDef("message.timestamp.after.max.ms", kmsg.ConfigTypeLong, maxLong, "log.message.timestamp.after.max.ms", true,
		"how far in the future of the broker's clock a CreateTime timestamp may be", atLeast(0)),
	intDef("message.timestamp.before.max.ms", kmsg.ConfigTypeLong, maxLong, "log.message.timestamp.before.max.ms", true,
		"how far in the past of the broker's clock a CreateTime timestamp may be", atLeast(0)),
	oneOf("message.timestamp.type", "CreateTime", "log.message.timestamp.type", true,
		"CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's clock", "CreateTime", "LogAppendTime"),
	{Name: "min.cleanable.dirty.ratio", Type: kmsg.ConfigTypeDouble, Default: "0.5", BrokerName: "log.cleaner.min.cleanable.ratio", Applied: true,
		Doc: "the share of a compacted log that must be uncleaned before the cleaner rewrites it", check: func(s string) error {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return fmt.Errorf("expected a number")
			}
			if v < 0 || v > 1 || math.IsNaN(v) {
				return fmt.Errorf("value must be between 0 and 1")
			}
			return nil
		}},
	intDef("min.compaction.lag.ms", kmsg.ConfigTypeLong, "0", "log.cleaner.min.compaction.lag.ms", true,
		"records younger than this are not compacted", atLeast(0)),
	intDef("min.insync.replicas", kmsg.ConfigTypeInt, "1", "min.insync.replicas", false, "one node: every write is on its one replica", atLeast(1)),
	boolDef("preallocate", "false", "log.preallocate", "segments are not preallocated", false),
	boolDef("remote.storage.enable", "false", "", "tiered storage is not served", false),
	intDef("retention.bytes", kmsg.ConfigTypeLong, "-1", "log.retention.bytes", true,
		"the oldest segments are deleted while a partition is larger than this; -1 for no limit", nil),
	intDef("retention.ms", kmsg.ConfigTypeLong, "604800000", "log.retention.ms", true,
		"segments whose newest record is older than this are deleted; -1 for no limit", atLeast(-1)),
	intDef("segment.bytes", kmsg.ConfigTypeInt, strconv.Itoa(partition.DefaultSegmentBytes), "log.segment.bytes", true,
		"the active segment is rolled before it grows past this (groupd's default is 256 MiB, Kafka's 1 GiB)", atLeast(14)),
	intDef("segment.index.bytes", kmsg.ConfigTypeInt, "10485760", "log.index.size.max.bytes", false, "indexes grow as needed", atLeast(4)),
	intDef("segment.jitter.ms", kmsg.ConfigTypeLong, "0", "log.roll.jitter.ms", false, "segments roll without jitter", atLeast(0)),
	intDef("segment.ms", kmsg.ConfigTypeLong, "604800000", "log.roll.ms", true,
		"the active segment is rolled once its records span this long", atLeast(1)),
	boolDef("unclean.leader.election.enable", "false", "unclean.leader.election.enable", "one node: there is no other leader", true),
}

// ConfigDefs returns the topic configs, sorted by name.
func ConfigDefs() []ConfigDef { return slices.Clone(configDefs) }

// LookupConfig returns the definition of a topic config.
func LookupConfig(name string) (ConfigDef, bool) {
	i, ok := slices.BinarySearchFunc(configDefs, name, func(d ConfigDef, n string) int { return strings.Compare(d.Name, n) })
	if !ok {
		return ConfigDef{}, false
	}
	return configDefs[i], true
}

// configError is Kafka's INVALID_CONFIG with a message.
type configError struct{ msg string }

func (e *configError) Error() string { return kerr.InvalidConfig.Message + ": " + e.msg }
func (e *configError) Unwrap() error { return kerr.InvalidConfig }

func invalidConfig(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...)}
}

// ValidateConfig checks one topic config's name and value. A nil value is
// refused: Kafka's topic configs all need one.
func ValidateConfig(name string, value *string) error {
	d, ok := LookupConfig(name)
	if !ok {
		return invalidConfig("unknown topic config name: %s", name)
	}
	if value == nil {
		return invalidConfig("null value not supported for topic config: %s", name)
	}
	if err := d.check(*value); err != nil {
		return invalidConfig("invalid value %s for configuration %s: %v", *value, name, err)
	}
	return nil
}

// ValidateConfigs checks a set of topic configs.
func ValidateConfigs(configs map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		v := configs[name]
		if err := ValidateConfig(name, &v); err != nil {
			return err
		}
	}
	return nil
}

// ConfigSource says where a config's value comes from, as DescribeConfigs
// reports it.
type ConfigSource = kmsg.ConfigSource

// ConfigValue is a topic config's effective value.
type ConfigValue struct {
	Def    ConfigDef
	Value  string
	Source ConfigSource
	// Synonyms are the values it could come from, most specific first:
	// the topic's own, the broker flag's, the default.
	Synonyms []Synonym
}

// Synonym is one place a config's value can come from.
type Synonym struct {
	Name   string
	Value  string
	Source ConfigSource
}

// resolveConfigs returns every topic config's value for a topic with the
// given overrides, under the broker defaults.
func resolveConfigs(overrides, brokerDefaults map[string]string) []ConfigValue {
	out := make([]ConfigValue, 0, len(configDefs))
	for _, d := range configDefs {
		cv := ConfigValue{Def: d, Value: d.Default, Source: kmsg.ConfigSourceDefaultConfig}
		var syns []Synonym
		if v, ok := overrides[d.Name]; ok {
			syns = append(syns, Synonym{d.Name, v, kmsg.ConfigSourceDynamicTopicConfig})
		}
		if v, ok := brokerDefaults[d.Name]; ok && d.BrokerName != "" {
			syns = append(syns, Synonym{d.BrokerName, v, kmsg.ConfigSourceStaticBrokerConfig})
		}
		if d.BrokerName != "" {
			syns = append(syns, Synonym{d.BrokerName, d.Default, kmsg.ConfigSourceDefaultConfig})
		}
		if len(syns) > 0 {
			cv.Value, cv.Source = syns[0].Value, syns[0].Source
		}
		cv.Synonyms = syns
		out = append(out, cv)
	}
	return out
}

// logConfig turns resolved configs into the partition log's settings.
// Values were validated when they were set.
func logConfig(values []ConfigValue) partition.Config {
	c := partition.DefaultConfig()
	for _, v := range values {
		s := strings.TrimSpace(v.Value)
		n, _ := strconv.ParseInt(s, 10, 64)
		switch v.Def.Name {
		case "cleanup.policy":
			ps := SplitList(s)
			c.Delete, c.Compact = slices.Contains(ps, "delete"), slices.Contains(ps, "compact")
		case "delete.retention.ms":
			c.DeleteRetentionMs = n
		case "max.compaction.lag.ms":
			c.MaxCompactionLagMs = n
		case "max.message.bytes":
			c.MaxMessageBytes = n
		case "message.timestamp.after.max.ms":
			c.TimestampAfterMaxMs = n
		case "message.timestamp.before.max.ms":
			c.TimestampBeforeMaxMs = n
		case "message.timestamp.type":
			c.LogAppendTime = s == "LogAppendTime"
		case "min.cleanable.dirty.ratio":
			c.MinCleanableDirtyRatio, _ = strconv.ParseFloat(s, 64)
		case "min.compaction.lag.ms":
			c.MinCompactionLagMs = n
		case "retention.bytes":
			c.RetentionBytes = n
		case "retention.ms":
			c.RetentionMs = n
		case "segment.bytes":
			c.SegmentBytes = n
		case "segment.ms":
			c.SegmentMs = n
		}
	}
	return c
}
