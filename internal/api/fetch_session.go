package api

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/server"
)

// FetchSessionCacheSlots bounds the open incremental fetch sessions
// (Kafka's max.incremental.fetch.session.cache.slots): 0 keeps Kafka's
// 1,000, a negative n serves no sessions.
func FetchSessionCacheSlots(n int) Option {
	return func(h *Handler) { h.sessionSlots = n }
}

// ConnClosed frees the fetch sessions of a closed connection.
func (h *Handler) ConnClosed(conn uint64) { h.sessions.ConnClosed(conn) }

// FetchSessions reports the fetch session cache's counters.
func (h *Handler) FetchSessions() fetchsession.Stats { return h.sessions.Stats() }

// beginFetchSession resolves a fetch's session fields (KIP-227). It
// returns the partitions to read, or a nil Fetch when the request was
// refused with a session error, which resp then carries. An incremental
// fetch reads its whole session: req.Topics is replaced by the session's
// partitions, so that the per-partition read below does not need to know
// where they came from.
func (h *Handler) beginFetchSession(r *server.Request, req *kmsg.FetchRequest, resp *kmsg.FetchResponse) ([]fetchEntry, *fetchsession.Fetch) {
	entries := fetchEntries(req)
	sr := fetchsession.Request{Conn: r.Conn, TopicIDs: req.Version >= 13, SessionID: req.SessionID, Epoch: req.SessionEpoch}
	if req.Version < 7 {
		// No session fields before v7: every fetch is a full one.
		sr.SessionID, sr.Epoch = fetchsession.NoSession, fetchsession.FinalEpoch
	}
	if sr.Epoch != fetchsession.FinalEpoch {
		// A fetch outside any session needs no copy of its partitions.
		sr.Parts = make([]fetchsession.Part, len(entries))
		for i, e := range entries {
			rt, rp := &req.Topics[e.topic], e.part
			sr.Parts[i] = fetchsession.Part{
				Key: fetchsession.Key{TopicID: rt.TopicID, Topic: rt.Topic, Partition: rp.Partition},
				Params: fetchsession.Params{FetchOffset: rp.FetchOffset, LogStartOffset: rp.LogStartOffset, MaxBytes: rp.PartitionMaxBytes,
					CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch},
			}
		}
		for _, ft := range req.ForgottenTopics {
			for _, p := range ft.Partitions {
				sr.Forgotten = append(sr.Forgotten, fetchsession.Key{TopicID: ft.TopicID, Topic: ft.Topic, Partition: p})
			}
		}
	}
	f := h.sessions.Begin(time.Now(), sr)
	switch f.Kind {
	case fetchsession.Failed:
		h.log.Debug("fetch session refused", "remote", r.Remote.String(), "session", sr.SessionID, "epoch", sr.Epoch, "err", kerr.ErrorForCode(f.ErrorCode))
		resp.ErrorCode = f.ErrorCode
		return nil, nil
	case fetchsession.Incremental:
		req.Topics = sessionTopics(f.Parts)
		entries = entries[:0]
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				entries = append(entries, fetchEntry{i, &req.Topics[i].Partitions[j]})
			}
		}
	}
	return entries, f
}

// sessionTopics lays out a session's partitions as request topics; only
// consecutive partitions of one topic share an entry, so the reply keeps
// the session's order.
func sessionTopics(parts []fetchsession.Part) []kmsg.FetchRequestTopic {
	var topics []kmsg.FetchRequestTopic
	for _, p := range parts {
		if n := len(topics); n == 0 || topics[n-1].Topic != p.Key.Topic || topics[n-1].TopicID != p.Key.TopicID {
			topics = append(topics, kmsg.FetchRequestTopic{Topic: p.Key.Topic, TopicID: p.Key.TopicID})
		}
		rt := &topics[len(topics)-1]
		rt.Partitions = append(rt.Partitions, kmsg.FetchRequestTopicPartition{
			Partition: p.Key.Partition, FetchOffset: p.Params.FetchOffset, LogStartOffset: p.Params.LogStartOffset,
			PartitionMaxBytes: p.Params.MaxBytes, CurrentLeaderEpoch: p.Params.CurrentLeaderEpoch, LastFetchedEpoch: p.Params.LastFetchedEpoch,
		})
	}
	return topics
}

// finishFetchSession completes a fetch's session once its partitions are
// read: a full fetch may open a session, and an incremental fetch's reply
// keeps only the partitions with something to say. resp holds one
// partition per entry read, in order.
func (h *Handler) finishFetchSession(f *fetchsession.Fetch, resp *kmsg.FetchResponse) {
	if f.Kind == fetchsession.Sessionless {
		return
	}
	results := make([]fetchsession.Result, 0, len(f.Parts))
	for ti := range resp.Topics {
		for _, sp := range resp.Topics[ti].Partitions {
			results = append(results, fetchsession.Result{ErrorCode: sp.ErrorCode, HighWatermark: sp.HighWatermark,
				LogStartOffset: sp.LogStartOffset, RecordBytes: len(sp.RecordBatches)})
		}
	}
	if len(results) != len(f.Parts) {
		panic("fetch reply does not answer each partition read once")
	}
	id, code, keep := h.sessions.Finish(time.Now(), f, results)
	resp.SessionID = id
	if code != 0 {
		resp.ErrorCode, resp.Topics = code, nil
		return
	}
	if keep == nil {
		return
	}
	i, topics := 0, resp.Topics[:0]
	for _, st := range resp.Topics {
		parts := st.Partitions[:0]
		for _, sp := range st.Partitions {
			if keep[i] {
				parts = append(parts, sp)
			}
			i++
		}
		if len(parts) > 0 {
			st.Partitions = parts
			topics = append(topics, st)
		}
	}
	resp.Topics = topics
}
