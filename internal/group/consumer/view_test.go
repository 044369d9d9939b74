package consumer

import (
	"testing"
	"time"
)

func TestViewAndUnload(t *testing.T) {
	m := New(Config{})
	m.Step(epoch0, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 3}}})
	m.Step(epoch0, Request{ID: 1, ClientID: "cli", ClientHost: "/h", Msg: joinRequest("a", "t")})
	at := epoch0.Add(time.Second)
	m.Step(at, Request{ID: 2, ClientID: "cli", ClientHost: "/h", Msg: heartbeatRequest("a", 1, nil)})

	if _, ok := m.View("nope"); ok {
		t.Fatal("view of an unknown group")
	}
	v, ok := m.View("g")
	if !ok {
		t.Fatal("no view")
	}
	if v.Type != "consumer" || v.State != "Stable" || v.Generation != 1 || v.MemberCount != 1 || v.Protocol != "uniform" || v.Rebalances != 1 || v.LastRebalance == nil {
		t.Fatalf("summary %+v", v.GroupSummary)
	}
	mem := v.Members[0]
	if mem.MemberID != "a" || mem.ClientID != "cli" || !mem.LastHeartbeat.Equal(at) || mem.SessionTimeoutMs != 45000 ||
		mem.RebalanceTimeoutMs != 60000 || len(mem.Assignment) != 1 || len(mem.Assignment[0].Partitions) != 3 {
		t.Fatalf("member %+v", mem)
	}

	out := m.Step(at, Unload{})
	if len(m.Groups()) != 0 || len(m.Deadlines()) != 0 {
		t.Fatal("unload left state behind")
	}
	if len(out.Timers) != 1 || !out.Timers[0].Cancel {
		t.Fatalf("unload timers %+v", out.Timers)
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := New(Config{}).Config()
	if c.SessionTimeout != 45*time.Second || c.HeartbeatInterval != 5*time.Second || c.MaxSize != 1<<31-1 ||
		len(c.Assignors) != 2 || c.Assignors[0] != "uniform" {
		t.Fatalf("defaults %+v", c)
	}
	// A session timeout outside the defaults widens the bounds it was
	// not given, so setting only the timeout is enough.
	if err := (Config{SessionTimeout: 10 * time.Second, HeartbeatInterval: 2 * time.Second}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{SessionTimeout: 10 * time.Second, MinSessionTimeout: 20 * time.Second},
		{SessionTimeout: 90 * time.Second, MaxSessionTimeout: 60 * time.Second},
		{HeartbeatInterval: 50 * time.Second},
		{HeartbeatInterval: 3 * time.Second, MinHeartbeatInterval: 4 * time.Second},
		{Assignors: []string{"sticky"}},
		{Assignors: []string{"range", "range"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}
