package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// topicConfig returns one config of a topic as DescribeConfigs shows it.
func topicConfig(t *testing.T, adm *kadm.Client, topic, name string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctxFor(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == name {
			return c
		}
	}
	t.Fatalf("%s has no config %s", topic, name)
	return kadm.Config{}
}

func wantConfig(t *testing.T, adm *kadm.Client, topic, name, value string, source kmsg.ConfigSource) {
	t.Helper()
	c := topicConfig(t, adm, topic, name)
	if c.MaybeValue() != value || c.Source != source {
		t.Fatalf("%s %s = %q from %v, want %q from %v", topic, name, c.MaybeValue(), c.Source, value, source)
	}
}

// TestTopicConfigsWithKadm: configs given at creation, changed
// incrementally (SET, DELETE, APPEND, SUBTRACT) and wholesale, are what
// DescribeConfigs shows, with their sources, and survive a restart; bad
// ones are refused with INVALID_CONFIG and a message.
func TestTopicConfigsWithKadm(t *testing.T) {
	dir := t.TempDir()
	withDefaults := func(c *app.Config) {
		c.TopicDefaults = map[string]string{"retention.ms": "3600000"}
	}
	a := startServer(t, dir, withDefaults)
	adm := kadm.NewClient(newClient(t, a.Addr()))
	ctx := ctxFor(t, 30*time.Second)

	resp, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("20000"), "segment.ms": kmsg.StringPtr("60000")}, "cfg")
	if err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	wantConfig(t, adm, "cfg", "max.message.bytes", "20000", kmsg.ConfigSourceDynamicTopicConfig)
	wantConfig(t, adm, "cfg", "retention.ms", "3600000", kmsg.ConfigSourceStaticBrokerConfig)
	wantConfig(t, adm, "cfg", "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)
	if syn := topicConfig(t, adm, "cfg", "retention.ms").Synonyms; len(syn) != 2 || syn[0].Key != "log.retention.ms" || syn[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.ms synonyms %+v", syn)
	}

	set := func(op kadm.IncrementalOp, name string, value *string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: op, Name: name, Value: value}
	}
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		set(kadm.SetConfig, "retention.bytes", kmsg.StringPtr("1000000")),
		set(kadm.DeleteConfig, "segment.ms", nil),
		set(kadm.AppendConfig, "cleanup.policy", kmsg.StringPtr("compact")),
	}, "cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, rs)
	}
	wantConfig(t, adm, "cfg", "retention.bytes", "1000000", kmsg.ConfigSourceDynamicTopicConfig)
	wantConfig(t, adm, "cfg", "segment.ms", "604800000", kmsg.ConfigSourceDefaultConfig)
	wantConfig(t, adm, "cfg", "cleanup.policy", "delete,compact", kmsg.ConfigSourceDynamicTopicConfig)
	wantConfig(t, adm, "cfg", "max.message.bytes", "20000", kmsg.ConfigSourceDynamicTopicConfig)
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set(kadm.SubtractConfig, "cleanup.policy", kmsg.StringPtr("delete"))}, "cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("subtract: %v %v", err, rs)
	}
	wantConfig(t, adm, "cfg", "cleanup.policy", "compact", kmsg.ConfigSourceDynamicTopicConfig)

	// Non-incremental AlterConfigs replaces the whole set.
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "message.timestamp.type", Value: kmsg.StringPtr("LogAppendTime")}}, "cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v %v", err, rs)
	}
	wantConfig(t, adm, "cfg", "message.timestamp.type", "LogAppendTime", kmsg.ConfigSourceDynamicTopicConfig)
	wantConfig(t, adm, "cfg", "max.message.bytes", "1048588", kmsg.ConfigSourceDefaultConfig)
	wantConfig(t, adm, "cfg", "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)

	// Refusals, and nothing changes.
	for _, bad := range []struct {
		cfg  kadm.AlterConfig
		want string
	}{
		{set(kadm.SetConfig, "retention.ms", kmsg.StringPtr("a week")), "invalid value a week for configuration retention.ms"},
		{set(kadm.SetConfig, "no.such.config", kmsg.StringPtr("1")), "unknown topic config name: no.such.config"},
		{set(kadm.SetConfig, "cleanup.policy", kmsg.StringPtr("forever")), "cleanup.policy"},
		{set(kadm.AppendConfig, "retention.ms", kmsg.StringPtr("5")), "not a list"},
	} {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{bad.cfg}, "cfg")
		if err != nil || !errors.Is(rs[0].Err, kerr.InvalidConfig) || !strings.Contains(rs[0].ErrMessage, bad.want) {
			t.Errorf("alter %s=%v: %v %v %q, want INVALID_CONFIG saying %q", bad.cfg.Name, bad.cfg.Value, err, rs[0].Err, rs[0].ErrMessage, bad.want)
		}
	}
	cr, _ := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("-5")}, "refused")
	if !errors.Is(cr.Err, kerr.InvalidConfig) || !strings.Contains(cr.ErrMessage, "retention.ms") {
		t.Fatalf("create with a bad config: %v %q", cr.Err, cr.ErrMessage)
	}
	if rs, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{set(kadm.SetConfig, "retention.ms", kmsg.StringPtr("1"))}, "cfg"); err != nil || rs[0].Err != nil {
		t.Fatalf("validate-only: %v %v", err, rs)
	}
	wantConfig(t, adm, "cfg", "retention.ms", "3600000", kmsg.ConfigSourceStaticBrokerConfig)
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set(kadm.SetConfig, "retention.ms", kmsg.StringPtr("1"))}, "nope"); err != nil || !errors.Is(rs[0].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("alter of a missing topic: %v %v", err, rs)
	}

	// The broker's own configs are its flags, read-only.
	brs, err := adm.DescribeBrokerConfigs(ctx, 0)
	if err != nil || len(brs) != 1 || brs[0].Err != nil {
		t.Fatalf("describe broker: %v %+v", err, brs)
	}
	found := false
	for _, c := range brs[0].Configs {
		if c.Key == "log.retention.ms" {
			found = c.MaybeValue() == "3600000" && c.Source == kmsg.ConfigSourceStaticBrokerConfig
		}
	}
	if !found {
		t.Fatalf("broker configs lack log.retention.ms=3600000 from the flag: %+v", brs[0].Configs)
	}
	for _, alter := range []func() (kadm.AlterConfigsResponses, error){
		func() (kadm.AlterConfigsResponses, error) {
			return adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set(kadm.SetConfig, "log.retention.ms", kmsg.StringPtr("1"))}, 0)
		},
		func() (kadm.AlterConfigsResponses, error) {
			return adm.AlterBrokerConfigsState(ctx, []kadm.AlterConfig{{Name: "log.retention.ms", Value: kmsg.StringPtr("1")}}, 0)
		},
	} {
		rs, err := alter()
		if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, kerr.InvalidRequest) || !strings.Contains(rs[0].ErrMessage, "flags") {
			t.Fatalf("altering the broker's configs: %v %+v, want INVALID_REQUEST", err, rs)
		}
	}

	stopServer(t, a)
	a = startServer(t, dir, withDefaults)
	adm = kadm.NewClient(newClient(t, a.Addr()))
	wantConfig(t, adm, "cfg", "message.timestamp.type", "LogAppendTime", kmsg.ConfigSourceDynamicTopicConfig)
	d, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil || !strings.Contains(string(d), "LogAppendTime") {
		t.Fatalf("meta.json does not hold the config: %v", err)
	}
}

// TestTopicConfigsWithSarama: a client of another family sets configs at
// creation and with the non-incremental AlterConfigs, and reads them back.
func TestTopicConfigsWithSarama(t *testing.T) {
	a := startServer(t, t.TempDir())
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin([]string{a.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	retention := "7200000"
	if err := admin.CreateTopic("s", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false); err != nil {
		t.Fatal(err)
	}
	describe := func() map[string]sarama.ConfigEntry {
		t.Helper()
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "s"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sarama.ConfigEntry{}
		for _, e := range entries {
			out[e.Name] = e
		}
		return out
	}
	if e := describe()["retention.ms"]; e.Value != "7200000" || e.Source != sarama.SourceTopic {
		t.Fatalf("retention.ms %+v", e)
	}
	policy := "compact"
	if err := admin.AlterConfig(sarama.TopicResource, "s", map[string]*string{"cleanup.policy": &policy}, false); err != nil {
		t.Fatal(err)
	}
	got := describe()
	if got["cleanup.policy"].Value != "compact" || got["retention.ms"].Source != sarama.SourceDefault {
		t.Fatalf("after AlterConfig: cleanup.policy %+v, retention.ms %+v", got["cleanup.policy"], got["retention.ms"])
	}
	bad := "sometimes"
	err = admin.AlterConfig(sarama.TopicResource, "s", map[string]*string{"cleanup.policy": &bad}, false)
	if !errors.Is(err, sarama.ErrInvalidConfig) {
		t.Fatalf("a bad value: %v", err)
	}
}

// TestTopicConfigsInterop: librdkafka (confluent-kafka) and kafka-python
// create a topic with configs and change them with AlterConfigs; their
// DescribeConfigs reads back what they set, and a bad value is refused.
func TestTopicConfigsInterop(t *testing.T) {
	for _, module := range []string{"confluent_kafka", "kafka"} {
		t.Run(module, func(t *testing.T) {
			requireTool(t, pythonWithClients(), "-c", "import "+module)
			a := startServer(t, t.TempDir())
			out := runClient(t, nil, pythonWithClients(), filepath.Join("testdata", "interop", "configs_client.py"), module, a.Addr(), "py-configs")
			for _, want := range []string{
				"created retention.ms=7200000 cleanup.policy=compact",
				// Non-incremental: what was not named is back to its default.
				"altered max.message.bytes=50000 retention.ms=604800000",
				"bad value refused: INVALID_CONFIG",
			} {
				if !strings.Contains(out, want) {
					t.Fatalf("%s: output lacks %q:\n%s", module, want, out)
				}
			}
			adm := kadm.NewClient(newClient(t, a.Addr()))
			wantConfig(t, adm, "py-configs", "max.message.bytes", "50000", kmsg.ConfigSourceDynamicTopicConfig)
		})
	}
}
