package assign

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// TestConcurrentAssignsAreIndependent runs assignors that reuse solver
// arrays across calls from many goroutines at once, with groups of
// different sizes so buffers of different lengths circulate: every result
// must equal the one computed alone.
func TestConcurrentAssignsAreIndependent(t *testing.T) {
	type job struct {
		a       Assignor
		members []Member
		topics  map[string]int32
		want    Assignment
	}
	var jobs []job
	for _, a := range []Assignor{Uniform(), Sticky(), CooperativeSticky()} {
		for n := 1; n <= 4; n++ {
			topics := map[string]int32{}
			for t := range n {
				topics[fmt.Sprintf("t%d", t)] = int32(7 * n)
			}
			var members []Member
			for m := range 3 * n {
				var subs []string
				for t := range n {
					if (m+t)%2 == 0 || t == 0 {
						subs = append(subs, fmt.Sprintf("t%d", t))
					}
				}
				members = append(members, Member{ID: fmt.Sprintf("m%02d", m), Topics: subs})
			}
			jobs = append(jobs, job{a: a, members: members, topics: topics, want: a.Assign(members, topics)})
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				j := jobs[(g+i)%len(jobs)]
				if got := j.a.Assign(j.members, j.topics); !reflect.DeepEqual(got, j.want) {
					t.Errorf("%s over %d topics: concurrent result differs from the one computed alone", j.a.Name(), len(j.topics))
					return
				}
			}
		})
	}
	wg.Wait()
}
