package lab

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Protocol is how the group's members rebalance.
type Protocol struct {
	// Name is what flags and reports call it: eager, cooperative,
	// consumer, or one of those with "-static".
	Name string `json:"name"`
	// Base is eager (the range assignor), cooperative
	// (cooperative-sticky) or consumer (KIP-848, the server's uniform
	// assignor).
	Base string `json:"base"`
	// Static members have a group.instance.id.
	Static bool `json:"static"`
}

// The protocols' base names.
const (
	Eager       = "eager"
	Cooperative = "cooperative"
	Consumer    = "consumer"
)

var baseProtocols = []string{Eager, Cooperative, Consumer}

// ParseProtocols reads a comma-separated list of protocol names; "all" is
// every base protocol and its static variant, "static" every static one.
func ParseProtocols(s string) ([]Protocol, error) {
	var out []Protocol
	add := func(p Protocol) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, name := range splitList(s) {
		switch name {
		case "all":
			for _, static := range []bool{false, true} {
				for _, b := range baseProtocols {
					add(protocolOf(b, static))
				}
			}
			continue
		case "static":
			for _, b := range baseProtocols {
				add(protocolOf(b, true))
			}
			continue
		}
		base, static := strings.CutSuffix(name, "-static")
		if !slices.Contains(baseProtocols, base) {
			return nil, fmt.Errorf("unknown protocol %q (want %s, each optionally with -static, or all)", name, strings.Join(baseProtocols, ", "))
		}
		add(protocolOf(base, static))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no protocol given")
	}
	return out, nil
}

func protocolOf(base string, static bool) Protocol {
	name := base
	if static {
		name += "-static"
	}
	return Protocol{Name: name, Base: base, Static: static}
}

// The scenarios.
const (
	ScaleOut           = "scale-out"
	ScaleIn            = "scale-in"
	RollingRestart     = "rolling-restart"
	Crash              = "crash"
	SlowConsumer       = "slow-consumer"
	PartitionsAdded    = "partitions-added"
	SubscriptionChange = "subscription-change"
)

// Scenarios lists every scenario, in the order reports show them.
var Scenarios = []string{ScaleOut, ScaleIn, RollingRestart, Crash, SlowConsumer, PartitionsAdded, SubscriptionChange}

// ScenarioDoc says what each scenario does to the group.
var ScenarioDoc = map[string]string{
	ScaleOut:           "N members, then k more join at once",
	ScaleIn:            "k of the N members leave cleanly at once",
	RollingRestart:     "each member in turn closes and starts again, the next once the group has settled, as a deployment rolls",
	Crash:              "one member dies without leaving: the broker learns of it by the session timeout",
	SlowConsumer:       "one member's processing of a poll outlasts the rebalance timeout while a new member joins",
	PartitionsAdded:    "the topic grows by half its partitions",
	SubscriptionChange: "every member also subscribes to a second topic",
}

// ParseScenarios reads a comma-separated list of scenario names; "all" is
// every scenario.
func ParseScenarios(s string) ([]string, error) {
	var out []string
	for _, name := range splitList(s) {
		if name == "all" {
			for _, sc := range Scenarios {
				if !slices.Contains(out, sc) {
					out = append(out, sc)
				}
			}
			continue
		}
		if !slices.Contains(Scenarios, name) {
			return nil, fmt.Errorf("unknown scenario %q (want %s, or all)", name, strings.Join(Scenarios, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario given")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Commit modes.
const (
	// CommitAuto commits processed records every AutoCommitInterval, and
	// before giving partitions up.
	CommitAuto = "auto"
	// CommitSync commits after processing each poll, waiting for it.
	CommitSync = "sync"
	// CommitOnRevoke commits only when partitions are given up.
	CommitOnRevoke = "revoke"
)

// Config is one lab run: which protocols and scenarios, and the workload.
type Config struct {
	// Bootstrap is the cluster to run against; empty starts an embedded
	// groupd in a temporary directory.
	Bootstrap string
	// AdminAddr is groupd's HTTP side, to read its own rebalance records;
	// set automatically for the embedded groupd, empty otherwise.
	AdminAddr string

	Protocols []Protocol
	Scenarios []string

	// Members is the group's size before the scenario; Change is the k of
	// scale-out and scale-in.
	Members    int
	Change     int
	Partitions int
	// Rate is the records produced per second; RecordBytes their size.
	Rate        int
	RecordBytes int
	// Processing is how long a member works on each record it polls.
	Processing time.Duration
	// MaxPollRecords bounds one poll.
	MaxPollRecords     int
	CommitMode         string
	AutoCommitInterval time.Duration
	// SessionTimeout, RebalanceTimeout and HeartbeatInterval are the
	// classic protocol's member settings. Under the consumer protocol the
	// broker sets the session timeout and heartbeat interval
	// (group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms); the rebalance timeout is the
	// member's still.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration

	// Quiet is the baseline before the first action; Cooldown the time
	// after the group settled from the last one.
	Quiet    time.Duration
	Cooldown time.Duration
	// RestartDelay is how long a restarting member is down.
	RestartDelay time.Duration
	// SettleTimeout bounds the wait for the group to settle after each
	// step; a run that does not settle fails.
	SettleTimeout time.Duration
	// Seed picks which members the scenarios act on and names the run's
	// groups and topics.
	Seed uint64

	// Progress, if set, receives the progress display; Terminal says it
	// is a terminal that can redraw a line.
	Progress io.Writer
	Terminal bool
	// Logger receives the clients' and the embedded broker's warnings.
	Logger *slog.Logger
}

// DefaultConfig is the default run: the three protocols over a rolling
// restart and a crash, at a modest size.
func DefaultConfig() Config {
	return Config{
		Protocols:          []Protocol{protocolOf(Eager, false), protocolOf(Cooperative, false), protocolOf(Consumer, false)},
		Scenarios:          []string{RollingRestart, Crash},
		Members:            4,
		Change:             2,
		Partitions:         12,
		Rate:               400,
		RecordBytes:        100,
		Processing:         time.Millisecond,
		MaxPollRecords:     100,
		CommitMode:         CommitAuto,
		AutoCommitInterval: time.Second,
		SessionTimeout:     6 * time.Second,
		RebalanceTimeout:   10 * time.Second,
		HeartbeatInterval:  time.Second,
		Quiet:              3 * time.Second,
		Cooldown:           2 * time.Second,
		RestartDelay:       500 * time.Millisecond,
		SettleTimeout:      60 * time.Second,
		Seed:               1,
	}
}

// Validate checks the settings that would make a run meaningless.
func (c *Config) Validate() error {
	switch {
	case len(c.Protocols) == 0:
		return fmt.Errorf("no protocol")
	case len(c.Scenarios) == 0:
		return fmt.Errorf("no scenario")
	case c.Members < 1:
		return fmt.Errorf("members must be at least 1")
	case c.Partitions < 1:
		return fmt.Errorf("partitions must be at least 1")
	case c.Rate < 1:
		return fmt.Errorf("rate must be at least 1 record a second")
	case c.RecordBytes < recordHeader:
		return fmt.Errorf("record bytes must be at least %d", recordHeader)
	case c.MaxPollRecords < 1:
		return fmt.Errorf("max poll records must be at least 1")
	case c.Processing < 0:
		return fmt.Errorf("processing time must not be negative")
	case c.SessionTimeout <= 0 || c.RebalanceTimeout <= 0 || c.HeartbeatInterval <= 0:
		return fmt.Errorf("session and rebalance timeouts and the heartbeat interval must be positive")
	case c.HeartbeatInterval >= c.SessionTimeout:
		return fmt.Errorf("the heartbeat interval must be below the session timeout")
	case c.SettleTimeout <= 0:
		return fmt.Errorf("settle timeout must be positive")
	}
	switch c.CommitMode {
	case CommitAuto, CommitSync, CommitOnRevoke:
	default:
		return fmt.Errorf("unknown commit mode %q (want auto, sync or revoke)", c.CommitMode)
	}
	if c.CommitMode == CommitAuto && c.AutoCommitInterval <= 0 {
		return fmt.Errorf("auto commit needs a positive interval")
	}
	for _, s := range c.Scenarios {
		if (s == ScaleIn || s == ScaleOut) && c.Change < 1 {
			return fmt.Errorf("%s needs --change of at least 1", s)
		}
		if s == ScaleIn && c.Change >= c.Members {
			return fmt.Errorf("scale-in of %d members needs more than %d members", c.Change, c.Members)
		}
		if s == Crash && c.Members < 2 {
			return fmt.Errorf("crash needs at least 2 members: a survivor takes the partitions over")
		}
	}
	return nil
}
