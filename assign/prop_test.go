package assign

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// problem is a random assignment input.
type problem struct {
	topics  map[string]int32
	names   []string
	members []Member
	homog   bool
}

func genProblem(t *rapid.T, withOwned bool) problem {
	nt := rapid.IntRange(1, 6).Draw(t, "ntopics")
	pr := problem{topics: map[string]int32{}}
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		pr.names = append(pr.names, name)
		pr.topics[name] = rapid.Int32Range(0, 9).Draw(t, "parts")
	}
	nm := rapid.IntRange(1, 8).Draw(t, "nmembers")
	pr.homog = rapid.Bool().Draw(t, "homog")
	all := rapid.SliceOfNDistinct(rapid.SampledFrom(pr.names), 1, nt, rapid.ID[string]).Draw(t, "subs")
	for i := range nm {
		m := Member{ID: fmt.Sprintf("m%d", i), Generation: -1}
		if rapid.Bool().Draw(t, "static") {
			m.InstanceID = fmt.Sprintf("i%d", rapid.IntRange(0, 9).Draw(t, "inst"))
		}
		if pr.homog {
			m.Topics = all
		} else {
			m.Topics = rapid.SliceOfNDistinct(rapid.SampledFrom(pr.names), 0, nt, rapid.ID[string]).Draw(t, "msubs")
		}
		pr.members = append(pr.members, m)
	}
	if withOwned {
		// Random, possibly conflicting, possibly out-of-range claims.
		for i := range pr.members {
			m := &pr.members[i]
			m.Generation = rapid.Int32Range(-1, 3).Draw(t, "gen")
			for _, name := range pr.names {
				ps := rapid.SliceOfNDistinct(rapid.Int32Range(0, 10), 0, 4, rapid.ID[int32]).Draw(t, "owned")
				if len(ps) > 0 {
					m.Owned = append(m.Owned, TopicPartitions{name, ps})
				}
			}
		}
	}
	return pr
}

func subscribes(m *Member, topic string) bool { return slices.Contains(m.Topics, topic) }

// checkValid: every partition of a subscribed topic is assigned exactly
// once, only to a subscriber, and every member has an entry. With
// allowMissing (cooperative round one), withheld partitions may be absent.
func checkValid(t *rapid.T, pr problem, a Assignment, allowMissing bool) map[string]string {
	owner := map[string]string{}
	byID := map[string]*Member{}
	for i := range pr.members {
		byID[pr.members[i].ID] = &pr.members[i]
		if _, ok := a[pr.members[i].ID]; !ok {
			t.Fatalf("member %s missing from assignment", pr.members[i].ID)
		}
	}
	for id, tps := range a {
		m := byID[id]
		if m == nil {
			t.Fatalf("unknown member %s", id)
		}
		for i, x := range tps {
			if i > 0 && tps[i-1].Topic >= x.Topic || !slices.IsSorted(x.Partitions) {
				t.Fatalf("%s: assignment not sorted: %v", id, tps)
			}
			if !subscribes(m, x.Topic) {
				t.Fatalf("%s got %s without subscribing", id, x.Topic)
			}
			for _, p := range x.Partitions {
				if p < 0 || p >= pr.topics[x.Topic] {
					t.Fatalf("%s got nonexistent %s/%d", id, x.Topic, p)
				}
				k := fmt.Sprintf("%s/%d", x.Topic, p)
				if o, dup := owner[k]; dup {
					t.Fatalf("%s assigned to %s and %s", k, o, id)
				}
				owner[k] = id
			}
		}
	}
	if !allowMissing {
		for _, name := range pr.names {
			sub := false
			for i := range pr.members {
				sub = sub || subscribes(&pr.members[i], name)
			}
			for p := range pr.topics[name] {
				if _, ok := owner[fmt.Sprintf("%s/%d", name, p)]; sub && !ok {
					t.Fatalf("%s/%d unassigned", name, p)
				}
			}
		}
	}
	return owner
}

// checkBalanced: identical subscriptions → max−min ≤ 1; otherwise no
// partition could move to an eligible member two or more below its owner,
// nor along any chain of eligible members (the stronger optimality).
func checkBalanced(t *rapid.T, pr problem, a Assignment) {
	load := map[string]int{}
	for id, tps := range a {
		for _, x := range tps {
			load[id] += len(x.Partitions)
		}
	}
	if pr.homog {
		lo, hi := 1<<30, -1
		for _, n := range load {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo > 1 {
			t.Fatalf("imbalance %d: %s", hi-lo, asString(a))
		}
		return
	}
	// edge u→v when u holds a partition of a topic v subscribes to.
	byID := map[string]*Member{}
	for i := range pr.members {
		byID[pr.members[i].ID] = &pr.members[i]
	}
	for src := range a {
		seen := map[string]bool{src: true}
		queue := []string{src}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, x := range a[u] {
				for v, m := range byID {
					if !seen[v] && subscribes(m, x.Topic) {
						if load[v] <= load[src]-2 {
							t.Fatalf("%s (%d) could give to %s (%d) via %s: %s", src, load[src], v, load[v], u, asString(a))
						}
						seen[v] = true
						queue = append(queue, v)
					}
				}
			}
		}
	}
}

func shuffled(t *rapid.T, pr problem) problem {
	out := pr
	out.members = slices.Clone(pr.members)
	perm := rapid.Permutation(out.members).Draw(t, "perm")
	for i := range perm {
		m := perm[i]
		m.Topics = rapid.Permutation(m.Topics).Draw(t, "tperm")
		perm[i] = m
	}
	out.members = perm
	return out
}

var allAssignors = []Assignor{Range(), RoundRobin(), Sticky(), CooperativeSticky(), Uniform(), ServerRange()}

func TestPropValidAndDeterministic(t *testing.T) {
	for _, as := range allAssignors {
		t.Run(as.Name()+fmt.Sprintf("%T", as), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				pr := genProblem(t, rapid.Bool().Draw(t, "owned"))
				// Duplicate instance ids make Kafka's order ambiguous;
				// the member id breaks the tie, so determinism holds.
				a := as.Assign(pr.members, pr.topics)
				checkValid(t, pr, a, as.Name() == "cooperative-sticky")
				b := as.Assign(shuffled(t, pr).members, pr.topics)
				if asString(a) != asString(b) {
					t.Fatalf("order-dependent:\n%s\n%s", asString(a), asString(b))
				}
			})
		})
	}
}

func TestPropBalanced(t *testing.T) {
	for _, as := range []Assignor{Sticky(), Uniform()} {
		t.Run(as.Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				pr := genProblem(t, rapid.Bool().Draw(t, "owned"))
				checkBalanced(t, pr, as.Assign(pr.members, pr.topics))
			})
		})
	}
}

// validClaims turns an assignment into Owned claims at generation gen.
func withOwned(ms []Member, a Assignment, gen int32) []Member {
	out := slices.Clone(ms)
	for i := range out {
		out[i].Owned = a[out[i].ID]
		out[i].Generation = gen
	}
	return out
}

func countMoves(prev, next Assignment) int {
	owner := map[string]string{}
	for id, ks := range flat(next) {
		for _, k := range ks {
			owner[k] = id
		}
	}
	moves := 0
	for id, ks := range flat(prev) {
		for _, k := range ks {
			if owner[k] != id {
				moves++
			}
		}
	}
	return moves
}

// TestPropSticky: starting from a balanced assignment, add or remove a
// member; with identical subscriptions the moves must equal the minimum the
// new quotas force. With any subscriptions, re-running with nothing changed
// moves nothing.
func TestPropSticky(t *testing.T) {
	for _, as := range []Assignor{Sticky(), Uniform()} {
		t.Run(as.Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				pr := genProblem(t, false)
				first := as.Assign(pr.members, pr.topics)
				ms := withOwned(pr.members, first, 1)
				if again := as.Assign(ms, pr.topics); countMoves(first, again) != 0 {
					t.Fatalf("no-op rebalance moved partitions:\n%s\n%s", asString(first), asString(again))
				}
				if rapid.Bool().Draw(t, "join") || len(ms) == 1 {
					ms = append(ms, Member{ID: "new", Topics: ms[0].Topics, Generation: -1})
				} else {
					k := rapid.IntRange(0, len(ms)-1).Draw(t, "leave")
					ms = slices.Delete(ms, k, k+1)
				}
				pr2 := pr
				pr2.members = ms
				pr2.homog = pr.homog
				next := as.Assign(ms, pr.topics)
				checkValid(t, pr2, next, false)
				checkBalanced(t, pr2, next)
				if !pr.homog {
					return
				}
				// Minimum moves: each member keeps min(had, minQ), and
				// up to N%M of those with more keep one extra.
				n := int32(0)
				for _, name := range ms[0].Topics {
					n += pr.topics[name]
				}
				minQ, extra := int(n)/len(ms), int(n)%len(ms)
				owned, keep, over := 0, 0, 0
				for _, m := range ms {
					c := 0
					for _, x := range m.Owned {
						c += len(x.Partitions)
					}
					owned += c
					keep += min(c, minQ)
					if c > minQ {
						over++
					}
				}
				keep += min(extra, over)
				if got := countMoves(flatOwned(ms), next); got != owned-keep {
					t.Fatalf("moved %d, minimum %d:\n%s", got, owned-keep, asString(next))
				}
			})
		})
	}
}

func flatOwned(ms []Member) Assignment {
	a := Assignment{}
	for _, m := range ms {
		a[m.ID] = m.Owned
	}
	return a
}

// TestPropCooperative runs the two KIP-429 rounds: round one never hands a
// member a partition another member still claims; members then revoke what
// they lost and rejoin; round two completes the assignment with identical
// subscriptions, and is as safe as round one.
func TestPropCooperative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pr := genProblem(t, false)
		cs := CooperativeSticky()
		// A previous, consistent assignment, then a membership change.
		start := cs.Assign(pr.members, pr.topics)
		ms := withOwned(pr.members, start, 5)
		if rapid.Bool().Draw(t, "join") || len(ms) == 1 {
			ms = append(ms, Member{ID: "new", Topics: ms[0].Topics, Generation: -1})
		} else {
			k := rapid.IntRange(0, len(ms)-1).Draw(t, "leave")
			ms = slices.Delete(ms, k, k+1)
		}
		pr.members = ms
		gen := int32(5)
		for round := 1; round <= 4; round++ {
			a := cs.Assign(ms, pr.topics)
			owner := checkValid(t, pr, a, true)
			for _, m := range ms {
				for _, x := range m.Owned {
					for _, p := range x.Partitions {
						if o, ok := owner[fmt.Sprintf("%s/%d", x.Topic, p)]; ok && o != m.ID {
							t.Fatalf("round %d: %s/%d given to %s while %s owns it", round, x.Topic, p, o, m.ID)
						}
					}
				}
			}
			total := 0
			for _, name := range pr.names {
				for i := range ms {
					if subscribes(&ms[i], name) {
						total += int(pr.topics[name])
						break
					}
				}
			}
			if len(owner) == total {
				if round > 2 && pr.homog {
					t.Fatalf("identical subscriptions needed %d rounds", round)
				}
				checkBalanced(t, pr, a)
				return
			}
			// Members keep the intersection of owned and assigned,
			// then rejoin with it; the coordinator bumps the generation.
			gen++
			ms = withOwned(ms, a, gen)
		}
		t.Fatalf("cooperative rebalance did not converge in 4 rounds")
	})
}

// TestPropBalancedClasses covers larger groups whose members share a few
// subscription patterns, the shape the sticky solver places per
// subscription class: valid, balanced, order-independent, and a no-op
// rebalance moves nothing.
func TestPropBalancedClasses(t *testing.T) {
	for _, as := range []Assignor{Sticky(), CooperativeSticky(), Uniform()} {
		t.Run(as.Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				nt := rapid.IntRange(1, 8).Draw(t, "ntopics")
				pr := problem{topics: map[string]int32{}}
				for i := range nt {
					name := fmt.Sprintf("t%d", i)
					pr.names = append(pr.names, name)
					pr.topics[name] = rapid.Int32Range(0, 40).Draw(t, "parts")
				}
				npat := rapid.IntRange(1, 4).Draw(t, "npatterns")
				var pats [][]string
				for range npat {
					pats = append(pats, rapid.SliceOfNDistinct(rapid.SampledFrom(pr.names), 1, nt, rapid.ID[string]).Draw(t, "pattern"))
				}
				nm := rapid.IntRange(1, 40).Draw(t, "nmembers")
				for i := range nm {
					pat := pats[rapid.IntRange(0, npat-1).Draw(t, "pat")]
					pr.members = append(pr.members, Member{ID: fmt.Sprintf("m%02d", i), Topics: pat, Generation: -1})
				}
				a := as.Assign(pr.members, pr.topics)
				checkValid(t, pr, a, false)
				checkBalanced(t, pr, a)
				if b := as.Assign(shuffled(t, pr).members, pr.topics); asString(a) != asString(b) {
					t.Fatalf("order-dependent:\n%s\n%s", asString(a), asString(b))
				}
				again := as.Assign(withOwned(pr.members, a, 1), pr.topics)
				if countMoves(a, again) != 0 {
					t.Fatalf("no-op rebalance moved partitions:\n%s\n%s", asString(a), asString(again))
				}
			})
		})
	}
}
