package clocktest

import (
	"reflect"
	"testing"
	"time"
)

func TestAdvanceFiresInDeadlineOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	c := New(start)
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, name+"@"+c.Now().Sub(start).String()) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(1*time.Second, at("a"))
	c.AfterFunc(2*time.Second, func() {
		at("b")()
		c.AfterFunc(500*time.Millisecond, at("b2")) // due within the same Advance
	})
	stop := c.AfterFunc(2500*time.Millisecond, at("stopped"))
	c.AfterFunc(10*time.Second, at("late"))
	if !stop() || stop() {
		t.Fatal("stop should succeed once")
	}
	c.Advance(3 * time.Second)
	want := []string{"a@1s", "b@2s", "b2@2.5s", "c@3s"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if c.Now() != start.Add(3*time.Second) || c.Pending() != 1 {
		t.Fatalf("now %v pending %d", c.Now(), c.Pending())
	}
	fired := false
	c.AfterFunc(0, func() { fired = true })
	if !fired {
		t.Fatal("a due timer did not run")
	}
}
