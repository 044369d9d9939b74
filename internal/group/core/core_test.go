package core

import (
	"encoding/binary"
	"testing"
	"time"
)

func TestTimers(t *testing.T) {
	var tm Timers
	t0 := time.UnixMilli(1000)
	a := TimerKey{Group: "g", Kind: TimerSession, Member: "a"}
	b := TimerKey{Group: "g", Kind: TimerHeartbeat, Member: "b"}
	c := TimerKey{Group: "h", Kind: TimerJoin}
	tm.Set(a, t0)
	tm.Set(b, t0.Add(time.Second))
	tm.Set(c, t0)
	up := tm.Updates()
	// Sorted by group, then kind: the classic heartbeat kind first.
	if len(up) != 3 || up[0].Key != b || up[1].Key != a || up[2].Key != c {
		t.Fatalf("updates %v", up)
	}
	if len(tm.Updates()) != 0 {
		t.Fatal("updates reported twice")
	}
	if tm.Due(b, t0) {
		t.Fatal("b is not due yet")
	}
	if !tm.Due(a, t0) || tm.Due(a, t0) {
		t.Fatal("a fires once")
	}
	tm.CancelGroup("g")
	up = tm.Updates()
	if len(up) != 2 || !up[0].Cancel || !up[1].Cancel || up[0].Key != b || up[1].Key != a {
		t.Fatalf("cancel updates %v", up)
	}
	if all := tm.All(); len(all) != 1 || all[0].Key != c {
		t.Fatalf("left %v", all)
	}
	// A key set, cancelled and set again in one step is reported once,
	// with its last deadline; one set and cancelled is reported
	// cancelled, even if the caller never saw it.
	d := TimerKey{Group: "h", Kind: TimerSync}
	tm.Set(d, t0)
	tm.Cancel(d)
	tm.Set(d, t0.Add(time.Minute))
	e := TimerKey{Group: "h", Kind: TimerPending, Member: "e"}
	tm.Set(e, t0)
	tm.Cancel(e)
	if tm.Len() != 2 {
		t.Fatalf("%d deadlines, want 2", tm.Len())
	}
	up = tm.Updates()
	if len(up) != 2 || up[0].Key != e || !up[0].Cancel || up[1].Key != d || up[1].Cancel || !up[1].Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("updates %v", up)
	}
	if _, ok := tm.Get(e); ok || len(tm.All()) != 2 {
		t.Fatalf("left %v", tm.All())
	}
	// Many keys in one step come out sorted.
	for i := range 20 {
		tm.Set(TimerKey{Group: "m", Kind: TimerSession, Member: string(rune('a' + i))}, t0)
	}
	if up := tm.Updates(); len(up) != 20 || up[0].Key.Member != "a" || up[19].Key.Member != "t" {
		t.Fatalf("%d updates", len(up))
	}
	tm.Reset()
	if tm.Len() != 0 || len(tm.Updates()) != 0 {
		t.Fatal("reset left state")
	}
}

func TestReader(t *testing.T) {
	b := AppendString(nil, "hi")
	b = AppendBytes(b, nil)
	b = AppendBytes(b, []byte{})
	b = AppendBool(b, true)
	b = AppendStrings(b, []string{"x", "y"})
	b = binary.AppendVarint(b, -5)
	r := NewReader(b)
	if r.String() != "hi" || r.Bytes() != nil {
		t.Fatal("string or nil bytes")
	}
	if e := r.Bytes(); e == nil || len(e) != 0 {
		t.Fatal("empty bytes")
	}
	if !r.Bool() || len(r.Strings()) != 2 || r.Int32() != -5 || r.Err != nil || len(r.B) != 0 {
		t.Fatalf("read back: %v", r.Err)
	}
	// A longer encoding than needed, a bool above 1 and a count the
	// input cannot hold are all corrupt.
	for _, bad := range [][]byte{{0x80, 0x00}, {2}, {100}} {
		r := NewReader(bad)
		switch bad[0] {
		case 0x80:
			r.Uvarint()
		case 2:
			r.Bool()
		default:
			r.Count(1)
		}
		if r.Err == nil {
			t.Errorf("%x accepted", bad)
		}
	}
}
