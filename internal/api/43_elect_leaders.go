package api

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/server"
)

// ElectLeaders (KIP-183, KIP-460). Cluster mode: each partition is checked
// against the node's view; one that needs an election gets a request in
// etcd (elections/<topic id>/<p>), the controller elects and deletes the
// request, and the answer is read from the view once the request is gone
// or the request's timeout passes (REQUEST_TIMED_OUT; the election may
// still happen). On a single node every partition's only replica leads:
// each existing partition is answered ELECTION_NOT_NEEDED, as a Kafka
// cluster of one broker answers.
func init() { register(kmsg.ElectLeaders, 0, 2, (*Handler).electLeaders) }

// electTarget is one partition of an ElectLeaders request.
type electTarget struct {
	topic string
	p     int32
	err   error
	// rev is the revision of the election request written for it, 0
	// if none was.
	rev int64
	tp  view.TP
}

func (h *Handler) electLeaders(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.ElectLeadersRequest)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	typ := meta.ElectPreferred
	switch {
	case req.Version == 0 || req.ElectionType == 0:
	case req.ElectionType == 1:
		typ = meta.ElectUnclean
	default:
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	all := req.Topics == nil
	var targets []*electTarget
	type key struct {
		topic string
		p     int32
	}
	seen := map[key]bool{}
	if all {
		targets = h.allPartitions()
	} else {
		for _, rt := range req.Topics {
			for _, p := range rt.Partitions {
				k := key{rt.Topic, p}
				if seen[k] {
					continue
				}
				seen[k] = true
				targets = append(targets, &electTarget{topic: rt.Topic, p: p})
			}
		}
	}
	if h.cl != nil {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		if timeout <= 0 {
			timeout = adminTimeout
		}
		h.clusterElect(ctx, typ, targets, timeout)
	} else {
		for _, t := range targets {
			if tp, ok := h.b.Topic(t.topic); !ok || t.p < 0 || int(t.p) >= len(tp.Partitions()) {
				t.err = kerr.UnknownTopicOrPartition
			} else {
				t.err = detail(kerr.ElectionNotNeeded, "partition %s-%d has one replica, which leads", t.topic, t.p)
			}
		}
	}
	byTopic := map[string]int{}
	for _, t := range targets {
		// Asked for every partition, Kafka leaves out the partitions
		// already led as asked.
		if all && errCode(t.err) == kerr.ElectionNotNeeded.Code {
			continue
		}
		i, ok := byTopic[t.topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[t.topic] = i
			st := kmsg.NewElectLeadersResponseTopic()
			st.Topic = t.topic
			resp.Topics = append(resp.Topics, st)
		}
		sp := kmsg.NewElectLeadersResponseTopicPartition()
		sp.Partition = t.p
		if t.err != nil {
			sp.ErrorCode, sp.ErrorMessage = errCode(t.err), errMessage(t.err)
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, sp)
	}
	return resp, nil
}

// allPartitions is every partition of every topic, for an ElectLeaders
// with a null topic list.
func (h *Handler) allPartitions() []*electTarget {
	var out []*electTarget
	if h.cl != nil {
		for _, t := range h.cl.Node.View().SortedTopics() {
			for p := range t.Partitions {
				out = append(out, &electTarget{topic: t.Name, p: int32(p)})
			}
		}
		return out
	}
	for _, t := range h.b.Topics() {
		for p := range t.Partitions() {
			out = append(out, &electTarget{topic: t.Name, p: int32(p)})
		}
	}
	return out
}

// clusterElect checks each target, asks the controller for the elections
// that are needed and waits for their outcome.
func (h *Handler) clusterElect(ctx context.Context, typ meta.ElectionType, targets []*electTarget, timeout time.Duration) {
	c := h.cl
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v := c.Node.View()
	var asked []*electTarget
	for _, t := range targets {
		tt, ok := v.Topic(t.topic)
		if !ok || t.p < 0 || int(t.p) >= len(tt.Partitions) {
			t.err = kerr.UnknownTopicOrPartition
			continue
		}
		t.tp = view.TP{Topic: tt.ID, Partition: t.p}
		if t.err = electionCheck(v, typ, t, false); t.err != nil {
			continue
		}
		rev, err := c.Node.RequestElection(ctx, t.tp, typ)
		if err != nil {
			if ctx.Err() != nil {
				err = kerr.RequestTimedOut
			}
			t.err = err
			continue
		}
		t.rev = rev
		asked = append(asked, t)
	}
	if len(asked) == 0 {
		return
	}
	pending := func(v *view.View, t *electTarget) bool {
		e, ok := v.Elections[t.tp]
		return v.Revision < t.rev || (ok && e.Revision == t.rev)
	}
	_ = c.Node.WaitView(ctx, func(v *view.View) bool {
		return !slices.ContainsFunc(asked, func(t *electTarget) bool { return pending(v, t) })
	})
	v = c.Node.View()
	for _, t := range asked {
		if pending(v, t) {
			t.err = detail(kerr.RequestTimedOut, "the election of %s-%d was asked of the controller and not done within the request's timeout", t.topic, t.p)
			continue
		}
		t.err = electionCheck(v, typ, t, true)
	}
}

// electionCheck tells whether partition t needs an election of typ (nil)
// or, once the controller has answered (done), whether it got it (nil):
// ELECTION_NOT_NEEDED when it is led as asked already,
// PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE when
// no replica may be elected.
func electionCheck(v *view.View, typ meta.ElectionType, t *electTarget, done bool) error {
	replicas := v.Replicas(t.tp)
	st, ok := v.States[t.tp]
	leader := meta.NoLeader
	if ok {
		leader = st.Leader
	}
	if typ == meta.ElectPreferred {
		pref := replicas[0]
		if leader == pref {
			if done {
				return nil
			}
			return detail(kerr.ElectionNotNeeded, "the preferred replica %d leads %s-%d", pref, t.topic, t.p)
		}
		sd, shutting := v.Shutdowns[pref]
		shutting = shutting && sd.Incarnation == v.Nodes[pref].Incarnation
		if !v.Alive(pref) || shutting || !ok || !slices.Contains(st.ISR, pref) {
			return detail(kerr.PreferredLeaderNotAvailable, "the preferred replica %d of %s-%d is not alive and in sync", pref, t.topic, t.p)
		}
		if done {
			return detail(kerr.PreferredLeaderNotAvailable, "the controller did not elect the preferred replica %d of %s-%d", pref, t.topic, t.p)
		}
		return nil
	}
	if leader != meta.NoLeader && v.Alive(leader) {
		if done {
			return nil
		}
		return detail(kerr.ElectionNotNeeded, "%s-%d has a live leader, %d", t.topic, t.p, leader)
	}
	if !slices.ContainsFunc(replicas, v.Alive) {
		return detail(kerr.EligibleLeadersNotAvailable, "no replica of %s-%d is alive", t.topic, t.p)
	}
	if done {
		return detail(kerr.EligibleLeadersNotAvailable, "the controller elected no leader of %s-%d", t.topic, t.p)
	}
	return nil
}
