package assign

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// targetModel is what a coordinator knows about a group: members, topics
// and the last target. It drives a Target and the stateless assignor side
// by side.
type targetModel struct {
	as      Assignor
	target  *Target
	members map[string]Member // Owned unused; the target is in last
	topics  map[string]int32
	last    Assignment
	names   []string // topic pool
	homog   bool     // every member subscribes to one shared list
	shared  []string
	// patterns, when set, are the only subscriptions members draw, so
	// that larger groups form a few subscription classes.
	patterns [][]string
	nextID   int
}

func newTargetModel(t *rapid.T, as Assignor) *targetModel {
	m := &targetModel{as: as, members: map[string]Member{}, topics: map[string]int32{}, last: Assignment{}}
	mode := rapid.SampledFrom([]string{"homogeneous", "patterns", "any"}).Draw(t, "mode")
	m.homog = mode == "homogeneous"
	maxParts := int32(12)
	if mode == "patterns" {
		maxParts = 40
	}
	for i := range rapid.IntRange(1, 5).Draw(t, "ntopics") {
		name := fmt.Sprintf("t%d", i)
		m.names = append(m.names, name)
		if n := rapid.Int32Range(0, maxParts).Draw(t, "parts"); n > 0 {
			m.topics[name] = n
		}
	}
	m.shared = m.drawTopics(t)
	nm := rapid.IntRange(0, 6).Draw(t, "nmembers")
	if mode == "patterns" {
		for range rapid.IntRange(1, 3).Draw(t, "npatterns") {
			m.patterns = append(m.patterns, m.drawTopics(t))
		}
		nm = rapid.IntRange(0, 40).Draw(t, "nmembers")
	}
	var initial []Member
	for range nm {
		initial = append(initial, m.newMember(t))
	}
	// The initial targets may be anything a restart could hand over:
	// conflicting, out of range, unsubscribed.
	for i := range initial {
		for _, name := range m.names {
			ps := rapid.SliceOfNDistinct(rapid.Int32Range(0, 14), 0, 3, rapid.ID[int32]).Draw(t, "owned")
			if len(ps) > 0 {
				initial[i].Owned = append(initial[i].Owned, TopicPartitions{name, ps})
			}
		}
		m.members[initial[i].ID] = initial[i]
		m.last[initial[i].ID] = initial[i].Owned
	}
	var err error
	m.target, err = NewTarget(as, initial, m.topics)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *targetModel) drawTopics(t *rapid.T) []string {
	if m.patterns != nil {
		return rapid.SampledFrom(m.patterns).Draw(t, "pattern")
	}
	// Duplicates and unknown topics are allowed in a subscription.
	pool := append(slices.Clone(m.names), "absent")
	return rapid.SliceOfN(rapid.SampledFrom(pool), 0, len(pool)+1).Draw(t, "subs")
}

func (m *targetModel) newMember(t *rapid.T) Member {
	m.nextID++
	mb := Member{ID: fmt.Sprintf("m%02d", m.nextID)}
	if rapid.IntRange(0, 3).Draw(t, "static") == 0 {
		mb.InstanceID = fmt.Sprintf("i%d", rapid.IntRange(0, 3).Draw(t, "inst"))
	}
	mb.Topics = m.shared
	if !m.homog {
		mb.Topics = m.drawTopics(t)
	}
	return mb
}

func (m *targetModel) ids() []string {
	ids := make([]string, 0, len(m.members))
	for id := range m.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// assign runs both and compares the results and the changed members.
func (m *targetModel) assign(t *rapid.T) {
	var ms []Member
	for _, id := range m.ids() {
		mb := m.members[id]
		mb.Owned = m.last[id]
		ms = append(ms, mb)
	}
	want := m.as.Assign(ms, m.topics)
	changed := m.target.Assign()
	got := m.target.Assignment()
	if asString(got) != asString(want) {
		t.Fatalf("target differs from %s.Assign:\n got: %s\nwant: %s", m.as.Name(), asString(got), asString(want))
	}
	var wantChanged []string
	for _, mb := range ms {
		if !sameTarget(mb.Owned, want[mb.ID]) {
			wantChanged = append(wantChanged, mb.ID)
		}
	}
	slices.Sort(wantChanged)
	slices.Sort(changed)
	if !slices.Equal(changed, wantChanged) {
		t.Fatalf("changed members %v, want %v", changed, wantChanged)
	}
	for id, tps := range want {
		if mine, ok := m.target.Member(id); !ok || asString(Assignment{id: mine}) != asString(Assignment{id: tps}) {
			t.Fatalf("Member(%s) = %v, want %v", id, mine, tps)
		}
	}
	m.last = want
}

func (m *targetModel) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"assign": m.assign,
		"join": func(t *rapid.T) {
			mb := m.newMember(t)
			m.members[mb.ID] = mb
			m.target.SetMember(mb.ID, mb.InstanceID, mb.Topics)
		},
		"leave": func(t *rapid.T) {
			ids := m.ids()
			if len(ids) == 0 {
				t.Skip("no members")
			}
			id := rapid.SampledFrom(ids).Draw(t, "leaving")
			delete(m.members, id)
			delete(m.last, id)
			if !m.target.RemoveMember(id) {
				t.Fatalf("RemoveMember(%s) found no member", id)
			}
		},
		"resubscribe": func(t *rapid.T) {
			ids := m.ids()
			if len(ids) == 0 {
				t.Skip("no members")
			}
			id := rapid.SampledFrom(ids).Draw(t, "member")
			mb := m.members[id]
			if m.homog && rapid.Bool().Draw(t, "everyone") {
				// The whole group moves to a new subscription.
				m.shared = m.drawTopics(t)
				for _, id := range ids {
					mb := m.members[id]
					mb.Topics = m.shared
					m.members[id] = mb
					m.target.SetMember(id, mb.InstanceID, mb.Topics)
				}
				return
			}
			mb.Topics = m.drawTopics(t)
			if rapid.Bool().Draw(t, "reinstance") {
				mb.InstanceID = fmt.Sprintf("i%d", rapid.IntRange(0, 3).Draw(t, "inst"))
			}
			m.members[id] = mb
			m.target.SetMember(id, mb.InstanceID, mb.Topics)
		},
		"rename": func(t *rapid.T) {
			ids := m.ids()
			if len(ids) == 0 {
				t.Skip("no members")
			}
			from := rapid.SampledFrom(ids).Draw(t, "from")
			m.nextID++
			to := fmt.Sprintf("m%02d", m.nextID)
			if err := m.target.RenameMember(from, to); err != nil {
				t.Fatal(err)
			}
			mb := m.members[from]
			mb.ID = to
			m.members[to] = mb
			m.last[to] = m.last[from]
			delete(m.members, from)
			delete(m.last, from)
		},
		"topic": func(t *rapid.T) {
			name := rapid.SampledFrom(m.names).Draw(t, "topic")
			n := m.topics[name]
			switch rapid.IntRange(0, 5).Draw(t, "how") {
			case 0:
				n = 0 // deleted
			case 1:
				n = rapid.Int32Range(0, 12).Draw(t, "count") // anything
			default:
				n += rapid.Int32Range(1, 4).Draw(t, "more") // the usual: it grows
			}
			if n > 0 {
				m.topics[name] = n
			} else {
				delete(m.topics, name)
			}
			if rapid.Bool().Draw(t, "whole") {
				m.target.SetTopics(m.topics)
			} else {
				m.target.SetTopic(name, n)
			}
		},
	}
}

// TestPropTargetMatchesAssign drives random sequences of joins, leaves,
// subscription changes, static replacements and topic changes through a
// Target and, at each Assign, compares its result with the stateless
// assignor given the previous target: identical assignments (so identical
// moves and balance) and exactly the members whose target changed.
func TestPropTargetMatchesAssign(t *testing.T) {
	for _, as := range []Assignor{Uniform(), ServerRange()} {
		t.Run(as.Name(), func(t *testing.T) {
			paths := checkTargetModel(t, as, newTargetModel)
			incremental := paths.ranged
			if as.Name() == "uniform" {
				incremental = min(paths.homogeneous, paths.general)
			}
			if incremental == 0 {
				t.Errorf("the incremental paths were never taken: %+v", paths)
			}
		})
	}
}

// checkTargetModel runs the model's random action sequences for as and
// returns how often each path was taken; no incremental Assign may find the
// kept state inconsistent.
func checkTargetModel(t *testing.T, as Assignor, newModel func(*rapid.T, Assignor) *targetModel) pathCounts {
	var paths pathCounts
	rapid.Check(t, func(t *rapid.T) {
		m := newModel(t, as)
		t.Repeat(m.actions())
		m.assign(t)
		p := m.target.paths
		paths.full += p.full
		paths.homogeneous += p.homogeneous
		paths.ranged += p.ranged
		paths.general += p.general
		paths.fallback += p.fallback
	})
	t.Logf("paths: %+v", paths)
	if paths.fallback > 0 {
		t.Errorf("%d incremental assignments found inconsistent state", paths.fallback)
	}
	return paths
}

func TestTargetRejectsBadInput(t *testing.T) {
	if _, err := NewTarget(Sticky(), nil, nil); err == nil {
		t.Error("NewTarget accepted a client-side assignor")
	}
	if _, err := NewTarget(Uniform(), []Member{{ID: "a"}, {ID: "a"}}, nil); err == nil {
		t.Error("NewTarget accepted duplicate member ids")
	}
	tg, err := NewTarget(Uniform(), []Member{{ID: "a"}, {ID: "b"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.RenameMember("x", "y"); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("rename of an unknown member: %v", err)
	}
	if err := tg.RenameMember("a", "b"); !errors.Is(err, ErrMemberExists) {
		t.Errorf("rename onto a present member: %v", err)
	}
	if tg.RemoveMember("x") {
		t.Error("RemoveMember reported an unknown member as removed")
	}
}

// TestTargetFallsBackWhenStateIsInconsistent corrupts a settled Target so
// that one partition sits in two targets: the partitions no longer add up,
// and Assign must recompute from scratch with the stateless assignor's
// result for those targets (which drops the doubly claimed partition from
// both, then deals it again).
func TestTargetFallsBackWhenStateIsInconsistent(t *testing.T) {
	for _, as := range []Assignor{Uniform(), ServerRange()} {
		t.Run(as.Name(), func(t *testing.T) {
			topics := map[string]int32{"x": 6, "y": 3}
			var ms []Member
			for _, id := range []string{"a", "b", "c"} {
				ms = append(ms, Member{ID: id, Topics: []string{"x", "y"}})
			}
			tg, err := NewTarget(as, ms, topics)
			if err != nil {
				t.Fatal(err)
			}
			tg.Assign()
			a, b := tg.byID["a"], tg.byID["b"]
			stolen := b.Owned[0].Partitions[0]
			a.Owned = append(slices.Clone(a.Owned), TopicPartitions{b.Owned[0].Topic, []int32{stolen}})
			a.tids = append(slices.Clone(a.tids), b.tids[0])
			a.count++
			for i := range ms {
				ms[i].Owned = tg.byID[ms[i].ID].Owned
			}
			tg.SetMember("d", "", []string{"x", "y"})
			ms = append(ms, Member{ID: "d", Topics: []string{"x", "y"}})
			tg.Assign()
			if tg.paths.fallback != 1 {
				t.Fatalf("paths %+v, want one fallback", tg.paths)
			}
			if got, want := asString(tg.Assignment()), asString(as.Assign(ms, topics)); got != want {
				t.Fatalf("after fallback\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestTargetPaths pins which path each usual change takes, so a change
// that silently sends them all to the full assignment fails here.
func TestTargetPaths(t *testing.T) {
	topics := map[string]int32{"x": 20, "y": 7}
	both, one := []string{"x", "y"}, []string{"x"}
	for _, tc := range []struct {
		name   string
		as     Assignor
		subs   [][]string
		change func(*Target)
		want   pathCounts
	}{
		{"uniform join", Uniform(), [][]string{both, both}, func(t *Target) { t.SetMember("c", "", both) }, pathCounts{homogeneous: 1}},
		{"uniform leave", Uniform(), [][]string{both, both}, func(t *Target) { t.RemoveMember("a") }, pathCounts{homogeneous: 1}},
		{"uniform grow", Uniform(), [][]string{both, both}, func(t *Target) { t.SetTopic("y", 9) }, pathCounts{homogeneous: 1}},
		{"uniform resubscribe", Uniform(), [][]string{both, both}, func(t *Target) { t.SetMember("a", "", one) }, pathCounts{general: 1}},
		{"uniform mixed join", Uniform(), [][]string{both, one}, func(t *Target) { t.SetMember("c", "", one) }, pathCounts{general: 1}},
		{"range join", ServerRange(), [][]string{both, one}, func(t *Target) { t.SetMember("c", "", both) }, pathCounts{ranged: 1}},
		{"range shrink", ServerRange(), [][]string{both, one}, func(t *Target) { t.SetTopic("x", 5) }, pathCounts{ranged: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms []Member
			for i, s := range tc.subs {
				ms = append(ms, Member{ID: string(rune('a' + i)), Topics: s})
			}
			tg, err := NewTarget(tc.as, ms, topics)
			if err != nil {
				t.Fatal(err)
			}
			tg.Assign()
			tg.paths = pathCounts{}
			tc.change(tg)
			tg.Assign()
			if tg.paths != tc.want {
				t.Errorf("paths %+v, want %+v", tg.paths, tc.want)
			}
		})
	}
}

// newLargeTargetModel is a targetModel at the scale where the incremental
// paths' heaps and batching matter: hundreds of members, thousands of
// partitions, with either one shared subscription or the benchmark's five
// overlapping subscription buckets. It starts settled (one full Assign from
// empty targets), as a coordinator's group does after its first epoch.
func newLargeTargetModel(t *rapid.T, as Assignor) *targetModel {
	m := &targetModel{as: as, members: map[string]Member{}, topics: map[string]int32{}, last: Assignment{}}
	for i := range rapid.IntRange(3, 10).Draw(t, "ntopics") {
		name := fmt.Sprintf("t%d", i)
		m.names = append(m.names, name)
		m.topics[name] = rapid.Int32Range(1, 400).Draw(t, "parts")
	}
	m.homog = rapid.Bool().Draw(t, "homog")
	m.shared = m.names
	if !m.homog {
		n := len(m.names)
		for b := range 5 {
			w := []string{m.names[(2*b)%n], m.names[(2*b+1)%n], m.names[(2*b+2)%n]}
			m.patterns = append(m.patterns, w)
		}
	}
	var initial []Member
	for range rapid.IntRange(1, 300).Draw(t, "nmembers") {
		mb := m.newMember(t)
		initial = append(initial, mb)
		m.members[mb.ID] = mb
	}
	var err error
	if m.target, err = NewTarget(as, initial, m.topics); err != nil {
		t.Fatal(err)
	}
	m.assign(t)
	return m
}

// TestPropTargetMatchesAssignLarge is TestPropTargetMatchesAssign on
// settled groups of up to 300 members and 4,000 partitions, where most
// Assigns take the incremental paths and their heaps and batches are more
// than a few entries deep.
func TestPropTargetMatchesAssignLarge(t *testing.T) {
	for _, as := range []Assignor{Uniform(), ServerRange()} {
		t.Run(as.Name(), func(t *testing.T) {
			paths := checkTargetModel(t, as, newLargeTargetModel)
			if paths.homogeneous+paths.general+paths.ranged <= paths.full {
				t.Errorf("mostly full assignments: %+v", paths)
			}
		})
	}
}
