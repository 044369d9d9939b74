package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/partition"
)

// Embedded is a groupd started in-process, in a temporary directory, for
// a lab run.
type Embedded struct {
	app *app.App
	dir string
}

// StartEmbedded starts groupd on free loopback ports, with its HTTP side
// on, and its data in a new temporary directory that Close removes. Its
// group settings follow the lab's cfg, so that what the lab's flags ask of
// the members, groupd allows.
func StartEmbedded(cfg Config) (*Embedded, error) {
	dir, err := os.MkdirTemp("", "groupd-lab-")
	if err != nil {
		return nil, err
	}
	gc := group.DefaultConfig()
	// A new group forms at once: the lab starts measuring only once
	// the group has settled, so the delay would only slow every run.
	gc.InitialRebalanceDelay = -1
	// Short sessions can be tried; clients still ask for their own.
	gc.MinSessionTimeout = min(time.Second, cfg.SessionTimeout)
	// Consumer-protocol members get their session and heartbeat interval
	// from the broker, so the lab's knobs are the broker's here, or
	// the consumer rows would run on Kafka's 45 s and 5 s.
	gc.Consumer.SessionTimeout = cfg.SessionTimeout
	gc.Consumer.HeartbeatInterval = cfg.HeartbeatInterval
	a, err := app.Start(app.Config{
		Listen:             "127.0.0.1:0",
		HTTPListen:         "127.0.0.1:0",
		DataDir:            dir,
		AutoCreateTopics:   true,
		DefaultPartitions:  1,
		ConnectionsMaxIdle: -1,
		Log:                partition.Options{Sync: partition.SyncAlways},
		Group:              gc,
		Logger:             cfg.Logger,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Embedded{app: a, dir: dir}, nil
}

// Addr is the Kafka listener; AdminAddr the HTTP side.
func (e *Embedded) Addr() string      { return e.app.Addr() }
func (e *Embedded) AdminAddr() string { return e.app.HTTPAddr() }

// Close stops groupd and removes its data.
func (e *Embedded) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := e.app.Close(ctx)
	if err == app.ErrStopped {
		err = nil
	}
	return errors.Join(err, os.RemoveAll(e.dir))
}

// consumerGroupHeartbeat is the consumer protocol's API key; franz-go
// speaks it from version 1 on.
var consumerGroupHeartbeat = kmsg.ConsumerGroupHeartbeat.Int16()

// consumerProtocolSupport asks every broker for its API versions: the
// consumer protocol is measured only where each serves
// ConsumerGroupHeartbeat v1 or later, since franz-go would otherwise fall
// back to the classic protocol without a word. It returns why not, or "".
func consumerProtocolSupport(ctx context.Context, adm *kadm.Client) (string, error) {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return "", err
	}
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("API versions of broker %d: %w", v.NodeID, v.Err)
		}
		mx, ok := v.KeyMaxVersion(consumerGroupHeartbeat)
		if !ok {
			return fmt.Sprintf("broker %d does not serve ConsumerGroupHeartbeat (API key %d)", v.NodeID, consumerGroupHeartbeat), nil
		}
		if mx < 1 {
			return fmt.Sprintf("broker %d serves ConsumerGroupHeartbeat (API key %d) only up to v%d; the client needs v1", v.NodeID, consumerGroupHeartbeat, mx), nil
		}
	}
	return "", nil
}

// BrokerView is what groupd itself recorded of a run's rebalances (its
// rebalance history, read from its admin API), beside the clients' view.
type BrokerView struct {
	// Rebalances counts the records that started after the baseline;
	// Duration summarizes them.
	Rebalances int   `json:"rebalances"`
	Duration   Stats `json:"duration"`
	// Changed counts the partitions that changed owner; MaxPause is the
	// longest pause groupd recorded for any.
	Changed  int     `json:"changed"`
	MaxPause float64 `json:"max_pause_ms"`
	// Triggers counts the records by trigger.
	Triggers map[string]int `json:"triggers"`
	// Records are the records themselves.
	Records []inspect.Rebalance `json:"records"`
}

// readBrokerView reads the group's rebalance history from groupd's admin
// API and keeps the rebalances that started within [since, until]: the
// group's first assignment and the members' leaving at the end are not
// part of the measurement.
func readBrokerView(ctx context.Context, adminAddr, groupID string, since, until time.Time) (*BrokerView, error) {
	u := "http://" + adminAddr + "/api/v1/group/rebalances?id=" + url.QueryEscape(groupID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	var all []inspect.Rebalance
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	v := &BrokerView{Triggers: map[string]int{}}
	var ds []time.Duration
	for _, r := range all {
		if r.StartedAt.Before(since) || r.StartedAt.After(until) {
			continue
		}
		v.Records = append(v.Records, r)
		v.Rebalances++
		v.Triggers[r.Trigger]++
		ds = append(ds, time.Duration(r.DurationMs)*time.Millisecond)
		v.Changed += r.Changed()
		v.MaxPause = max(v.MaxPause, float64(r.MaxPause().Milliseconds()))
	}
	slices.SortFunc(v.Records, func(a, b inspect.Rebalance) int { return cmp.Compare(a.Seq, b.Seq) })
	v.Duration = statsOf(ds)
	return v, nil
}
