package fetchsession

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestNextEpochWrapsToOne(t *testing.T) {
	for _, c := range []struct{ in, want int32 }{{0, 1}, {1, 2}, {1<<31 - 1, 1}, {-1, -1}, {-5, -1}} {
		if got := nextEpoch(c.in); got != c.want {
			t.Errorf("nextEpoch(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestRandomIDs checks that the default generator hands out distinct
// positive ids even when its candidates collide with open sessions.
func TestRandomIDs(t *testing.T) {
	c := New(Config{MaxSessions: 5000})
	seen := map[int32]bool{}
	for range 2000 {
		f := c.Begin(time.Unix(0, 0), Request{Epoch: InitialEpoch, Parts: []Part{{Key: Key{Topic: "t"}}}})
		id, _, _ := c.Finish(time.Unix(0, 0), f, []Result{{}})
		if id <= 0 || seen[id] {
			t.Fatalf("session id %d: not positive or handed out twice", id)
		}
		seen[id] = true
	}
	// A generator that repeats itself: the cache draws again.
	calls := 0
	c = New(Config{NewID: func() int32 { calls++; return int32(min(calls, 3)) }})
	for want := int32(1); want <= 3; want++ {
		f := c.Begin(time.Unix(0, 0), Request{Epoch: InitialEpoch})
		if id, _, _ := c.Finish(time.Unix(0, 0), f, nil); id != want {
			t.Fatalf("got session %d, want %d", id, want)
		}
	}
}

// TestRandomWalk runs random fetches, closes and clock moves against a
// small cache and checks its bookkeeping after each step: the partition
// count is the sum of the sessions' sizes, no session outlives the cap, and
// an incremental fetch reads exactly the partitions a model of the session
// holds.
func TestRandomWalk(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		c := New(Config{MaxSessions: 4, NewID: SequentialIDs()})
		now := time.Unix(0, 0)
		type client struct {
			id, epoch int32
			parts     map[Key]bool
		}
		clients := make([]client, 6)
		for step := range 300 {
			i := r.IntN(len(clients))
			cl := &clients[i]
			switch r.IntN(10) {
			case 0:
				c.ConnClosed(uint64(i))
				*cl = client{}
			case 1:
				now = now.Add(time.Duration(r.IntN(90)) * time.Second)
			default:
				req := Request{Conn: uint64(i), SessionID: cl.id, Epoch: cl.epoch}
				var named []Key
				for range r.IntN(4) {
					k := Key{Topic: "t", Partition: int32(r.IntN(8))}
					named = append(named, k)
					req.Parts = append(req.Parts, Part{Key: k})
				}
				if cl.id != 0 && r.IntN(3) == 0 {
					k := Key{Topic: "t", Partition: int32(r.IntN(8))}
					req.Forgotten = append(req.Forgotten, k)
				}
				f := c.Begin(now, req)
				if f.Kind == Incremental {
					for _, k := range named {
						cl.parts[k] = true
					}
					for _, k := range req.Forgotten {
						delete(cl.parts, k)
					}
					if len(f.Parts) != len(cl.parts) {
						t.Fatalf("seed %d step %d: session reads %d partitions, model holds %d", seed, step, len(f.Parts), len(cl.parts))
					}
					for _, p := range f.Parts {
						if !cl.parts[p.Key] {
							t.Fatalf("seed %d step %d: session reads %v, not in the model", seed, step, p.Key)
						}
					}
				}
				results := make([]Result, len(f.Parts))
				for j := range results {
					results[j] = Result{HighWatermark: int64(r.IntN(3)), RecordBytes: r.IntN(2)}
				}
				id, code, _ := c.Finish(now, f, results)
				switch {
				case code != 0 || f.Kind == Sessionless || id == NoSession:
					*cl = client{}
				case f.Kind == Full:
					*cl = client{id: id, epoch: 1, parts: map[Key]bool{}}
					for _, p := range f.Parts {
						cl.parts[p.Key] = true
					}
				default:
					cl.epoch = nextEpoch(cl.epoch)
				}
			}
			st := c.Stats()
			sum := 0
			for _, s := range c.sessions {
				sum += s.size
			}
			if st.Sessions > 4 || st.Partitions != sum {
				t.Fatalf("seed %d step %d: %d sessions holding %d partitions, counted %d", seed, step, st.Sessions, sum, st.Partitions)
			}
		}
	}
}
