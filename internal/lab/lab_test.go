package lab

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"
)

var (
	fullMatrix = flag.Bool("lab.full", false, "run every scenario under every protocol (several minutes), instead of the representative subset against the embedded groupd and the rolling restart and crash against kfake")
	defaultRun = flag.Bool("lab.default", false, "TestLabKfake runs the default run's sizes and timeouts (eager, cooperative and consumer over rolling-restart and crash) instead of the short ones")
	reportFile = flag.String("lab.report", "", "TestLabKfake writes its HTML report to this file")
)

// shortConfig is the lab at test size: a few members, short timeouts, a
// short baseline.
func shortConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Members = 3
	cfg.Change = 1
	cfg.Partitions = 6
	cfg.Rate = 200
	cfg.Quiet = 500 * time.Millisecond
	cfg.Cooldown = 300 * time.Millisecond
	cfg.RestartDelay = 200 * time.Millisecond
	cfg.SessionTimeout = 2 * time.Second
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.RebalanceTimeout = 2 * time.Second
	cfg.AutoCommitInterval = 300 * time.Millisecond
	cfg.SettleTimeout = 30 * time.Second
	level := slog.LevelError
	if os.Getenv("GROUPD_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	return cfg
}

// runLab runs the lab and fails the test if any run failed, printing the
// table either way.
func runLab(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if rep != nil {
		var tb bytes.Buffer
		if werr := WriteTable(&tb, rep); werr != nil {
			t.Error(werr)
		}
		t.Logf("\n%s", tb.String())
	}
	if err != nil {
		t.Fatalf("lab run: %v", err)
	}
	return rep
}

// The representative subset runs every scenario and every protocol at
// least once; -lab.full runs the whole matrix.
var subset = map[string]string{
	RollingRestart:     "eager,cooperative,consumer,eager-static,cooperative-static",
	Crash:              "eager,cooperative",
	ScaleOut:           "cooperative",
	ScaleIn:            "eager",
	SlowConsumer:       "cooperative",
	PartitionsAdded:    "eager",
	SubscriptionChange: "cooperative",
}

// TestLabEmbedded runs the scenarios against the embedded groupd and checks
// the shape every protocol must show.
func TestLabEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs live consumer groups for about a minute")
	}
	for _, sc := range Scenarios {
		t.Run(sc, func(t *testing.T) {
			cfg := shortConfig(t)
			cfg.Scenarios = []string{sc}
			protocols := subset[sc]
			if *fullMatrix {
				protocols = "all"
			}
			var err error
			if cfg.Protocols, err = ParseProtocols(protocols); err != nil {
				t.Fatal(err)
			}
			// The other commit modes: clean changes under them
			// read nothing twice.
			noDuplicates := false
			switch sc {
			case ScaleIn:
				cfg.CommitMode, noDuplicates = CommitOnRevoke, true
			case PartitionsAdded:
				cfg.CommitMode, noDuplicates = CommitSync, true
			}
			rep := runLab(t, cfg)
			for i := range rep.Results {
				res := &rep.Results[i]
				t.Run(res.Protocol.Name, func(t *testing.T) {
					if res.Unsupported != "" {
						// groupd serves the consumer protocol only
						// once it advertises API key 68; until then it
						// must be reported, not measured as classic.
						if res.Protocol.Base != Consumer || res.Measurements != nil {
							t.Fatalf("unsupported %q for %s with measurements %v", res.Unsupported, res.Protocol.Name, res.Measurements != nil)
						}
						t.Logf("consumer protocol not served by this groupd: %s", res.Unsupported)
						return
					}
					checkShape(t, res)
					// A static member that leaves is still in the
					// group until its session expires, so no revoke
					// commits for it.
					if noDuplicates && !res.Protocol.Static && res.Measurements.Duplicates != 0 {
						t.Errorf("commit %s: %d records consumed twice in a clean %s", cfg.CommitMode, res.Measurements.Duplicates, sc)
					}
					if res.Broker == nil {
						t.Errorf("no rebalance records from the embedded groupd: %s", res.BrokerErr)
					} else if res.Measurements.Rebalances > 0 && res.Broker.Rebalances == 0 {
						t.Errorf("clients saw %d rebalances, groupd recorded none", res.Measurements.Rebalances)
					}
				})
			}
		})
	}
}

// TestLabKfake runs the lab against franz-go's kfake through
// --bootstrap-server: a broker it does not embed, and one that serves the
// consumer protocol.
func TestLabKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("runs live consumer groups")
	}
	cfg := shortConfig(t)
	protocols := "consumer,cooperative,consumer-static"
	if *defaultRun {
		short := cfg
		cfg = DefaultConfig()
		cfg.Logger, cfg.Progress = short.Logger, short.Progress
		protocols = "eager,cooperative,consumer"
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second),
		// The consumer protocol's session and heartbeat are the
		// broker's to set: the same as the classic members ask for.
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.session.timeout.ms":    fmt.Sprint(cfg.SessionTimeout.Milliseconds()),
			"group.consumer.heartbeat.interval.ms": fmt.Sprint(cfg.HeartbeatInterval.Milliseconds()),
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg.Bootstrap = c.ListenAddrs()[0]
	runs := []struct{ scenarios, protocols string }{{RollingRestart + "," + Crash, protocols}}
	if *fullMatrix {
		// kfake keeps the partitions of a static consumer-protocol
		// member that left (epoch -2) reserved past the session
		// timeout, so its scale-in never settles there.
		runs = []struct{ scenarios, protocols string }{
			{"scale-out,rolling-restart,crash,slow-consumer,partitions-added,subscription-change", "all"},
			{ScaleIn, "eager,cooperative,consumer,eager-static,cooperative-static"},
		}
	}
	rep := &Report{}
	for _, r := range runs {
		if cfg.Scenarios, err = ParseScenarios(r.scenarios); err != nil {
			t.Fatal(err)
		}
		if cfg.Protocols, err = ParseProtocols(r.protocols); err != nil {
			t.Fatal(err)
		}
		part := runLab(t, cfg)
		if want := len(cfg.Scenarios) * len(cfg.Protocols); len(part.Results) != want {
			t.Fatalf("%d results, want %d", len(part.Results), want)
		}
		rep.Results = append(rep.Results, part.Results...)
		rep.Broker, rep.Config, rep.Started = part.Broker, part.Config, part.Started
	}
	if *reportFile != "" {
		var b bytes.Buffer
		if err := WriteHTML(&b, rep); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*reportFile, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		t.Run(res.Scenario+"/"+res.Protocol.Name, func(t *testing.T) {
			if res.Unsupported != "" {
				t.Fatalf("kfake serves the consumer protocol, yet: %s", res.Unsupported)
			}
			checkShape(t, res)
			if res.Broker != nil {
				t.Errorf("rebalance records from kfake, which keeps none")
			}
		})
	}
}

// TestLabConsumerUnsupported: against a broker that does not advertise
// ConsumerGroupHeartbeat, the consumer protocol is reported unsupported
// (franz-go would quietly run the classic protocol instead), and the
// classic protocols still run.
func TestLabConsumerUnsupported(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a live consumer group")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(kversion.V3_9_0()), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := shortConfig(t)
	cfg.Bootstrap = c.ListenAddrs()[0]
	cfg.Scenarios = []string{ScaleOut}
	cfg.Protocols, _ = ParseProtocols("consumer,cooperative")
	rep := runLab(t, cfg)
	con, coop := rep.Results[0], rep.Results[1]
	if con.Unsupported == "" || con.Measurements != nil || !strings.Contains(con.Unsupported, "API key 68") {
		t.Errorf("consumer against a 3.9 broker: unsupported %q, measured %v", con.Unsupported, con.Measurements != nil)
	}
	if coop.Unsupported != "" || coop.Measurements == nil {
		t.Errorf("cooperative did not run: %q", coop.Unsupported)
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "unsupported by the broker") {
		t.Errorf("the table does not say the consumer protocol is unsupported:\n%s", tb.String())
	}
}

// checkShape checks what each protocol must show, whatever the timings:
// nothing lost; eager pauses every partition in each rebalance;
// cooperative and consumer pause only the partitions that moved or whose
// member was acted on; the consumer protocol never stops the world; a
// static rolling restart moves nothing.
func checkShape(t *testing.T, res *Result) {
	t.Helper()
	if res.Failed() {
		t.Fatalf("run failed: %s", res.Err)
	}
	m := res.Measurements
	if m.Lost != 0 || m.Produced == 0 || m.Consumed < m.Produced {
		t.Errorf("%d lost, %d produced, %d consumed", m.Lost, m.Produced, m.Consumed)
	}
	static := res.Protocol.Static && res.Scenario == RollingRestart
	if static {
		if m.Moved != 0 {
			t.Errorf("a static rolling restart moved %d partitions", m.Moved)
		}
	} else if m.Rebalances == 0 || len(m.Windows) == 0 {
		t.Errorf("no rebalance seen: %d generations, %d windows", m.Rebalances, len(m.Windows))
	}
	acted := map[string]bool{}
	for _, a := range res.Actions {
		for _, name := range strings.Split(a.Member, ",") {
			acted[name] = true
		}
	}
	switch res.Protocol.Base {
	case Eager:
		// A slow member is a zombie after its eviction: it still
		// holds its partitions while they are given to others, so
		// they overlap instead of pausing.
		if res.Scenario == SlowConsumer || static {
			break
		}
		for _, w := range m.Windows {
			for _, tp := range ownedBefore(m, w.Start) {
				if !slices.ContainsFunc(m.Pauses, func(p Pause) bool { return p.TP == tp && p.From <= w.End && p.To >= w.Start }) {
					t.Errorf("eager rebalance %v-%v did not pause %s", w.Start, w.End, tp)
				}
			}
		}
	case Cooperative, Consumer:
		for _, p := range m.Pauses {
			if p.Prev == p.Next && !acted[p.Prev] {
				t.Errorf("%s paused %v-%v and stayed with %s, which the lab did not touch", p.TP, p.From, p.To, p.Prev)
			}
		}
		if res.Protocol.Base == Consumer && m.StopTheWorld != 0 {
			t.Errorf("the consumer protocol stopped the world for %v", m.StopTheWorld)
		}
	}
}

// ownedBefore lists the partitions some member owned just before at.
func ownedBefore(m *Measurements, at time.Duration) []TP {
	var out []TP
	for _, s := range m.Spans {
		if s.From < at && s.To >= at && !slices.Contains(out, s.TP) {
			out = append(out, s.TP)
		}
	}
	return out
}

func TestParse(t *testing.T) {
	ps, err := ParseProtocols("eager, consumer-static,eager")
	if err != nil || len(ps) != 2 || ps[1] != (Protocol{Name: "consumer-static", Base: Consumer, Static: true}) {
		t.Errorf("ParseProtocols = %+v, %v", ps, err)
	}
	if ps, _ := ParseProtocols("all"); len(ps) != 6 {
		t.Errorf("all = %d protocols, want 6", len(ps))
	}
	if _, err := ParseProtocols("sticky"); err == nil {
		t.Error("an unknown protocol was accepted")
	}
	if ss, _ := ParseScenarios("all"); !slices.Equal(ss, Scenarios) {
		t.Errorf("all = %v", ss)
	}
	if _, err := ParseScenarios("crash,reboot"); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
	cfg.Scenarios = []string{ScaleIn}
	cfg.Change = cfg.Members
	if err := cfg.Validate(); err == nil {
		t.Error("scale-in of every member was accepted")
	}
	cfg = DefaultConfig()
	cfg.CommitMode = "never"
	if err := cfg.Validate(); err == nil {
		t.Error("an unknown commit mode was accepted")
	}
}

func TestRecordCodec(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	v := encodeRecord(make([]byte, 40), 42, at)
	key, got, ok := decodeRecord(v)
	if !ok || key != 42 || !got.Equal(at) {
		t.Errorf("decode = %d %v %v", key, got, ok)
	}
	if _, _, ok := decodeRecord(v[:recordHeader-1]); ok {
		t.Error("a short value decoded")
	}
}

// FuzzDecodeRecord: any value a topic holds decodes without a panic, and
// what decodes encodes back to the same header.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(make([]byte, 40), 42, time.Unix(1700000000, 5)))
	f.Add([]byte("short"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		key, at, ok := decodeRecord(v)
		if ok != (len(v) >= recordHeader) {
			t.Fatalf("decodeRecord of %d bytes: ok %v", len(v), ok)
		}
		if !ok {
			return
		}
		if back := encodeRecord(make([]byte, recordHeader), key, at); !bytes.Equal(back, v[:recordHeader]) {
			t.Fatalf("%x decoded to %d %v, which encodes to %x", v[:recordHeader], key, at, back)
		}
	})
}
