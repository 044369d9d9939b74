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
// returns the fetch whose Parts are to be answered (the request's, or an
// incremental fetch's whole session), or nil when the request was refused
// with a session error, which resp then carries.
func (h *Handler) beginFetchSession(r *server.Request, req *kmsg.FetchRequest, resp *kmsg.FetchResponse, sc *fetchScratch) *fetchsession.Fetch {
	sr := fetchsession.Request{Conn: r.Conn, TopicIDs: req.Version >= 13, SessionID: req.SessionID, Epoch: req.SessionEpoch}
	if req.Version < 7 {
		// No session fields before v7: every fetch is a full one.
		sr.SessionID, sr.Epoch = fetchsession.NoSession, fetchsession.FinalEpoch
	}
	// The cache copies what it keeps of the parts: their memory is the
	// scratch's, for the next fetch.
	sc.parts = requestParts(req, sc.parts)
	sr.Parts = sc.parts
	if sr.Epoch != fetchsession.FinalEpoch {
		for _, ft := range req.ForgottenTopics {
			for _, p := range ft.Partitions {
				sr.Forgotten = append(sr.Forgotten, fetchsession.Key{TopicID: ft.TopicID, Topic: ft.Topic, Partition: p})
			}
		}
	}
	f := h.sessions.Begin(time.Now(), sr)
	if f.Kind == fetchsession.Failed {
		h.log.Debug("fetch session refused", "remote", r.Remote.String(), "session", sr.SessionID, "epoch", sr.Epoch, "err", kerr.ErrorForCode(f.ErrorCode))
		resp.ErrorCode = f.ErrorCode
		return nil
	}
	return f
}

// finishFetchSession completes a fetch's session once its partitions are
// read: a full fetch may open a session, and an incremental fetch's reply
// keeps only the partitions with something to say. resp holds one
// partition per entry of answered (indexes in f.Parts), in order; the
// other parts of an incremental fetch were left unread. The results are
// gathered in *buf, kept for the next fetch.
func (h *Handler) finishFetchSession(f *fetchsession.Fetch, resp *kmsg.FetchResponse, answered []int, buf *[]fetchsession.Result) {
	if f.Kind == fetchsession.Sessionless {
		return
	}
	results := (*buf)[:0]
	for range f.Parts {
		results = append(results, fetchsession.Result{Unread: true})
	}
	*buf = results
	k := 0
	for ti := range resp.Topics {
		for _, sp := range resp.Topics[ti].Partitions {
			if k == len(answered) {
				panic("fetch reply answers more partitions than were read")
			}
			results[answered[k]] = fetchsession.Result{ErrorCode: sp.ErrorCode, HighWatermark: sp.HighWatermark,
				LogStartOffset: sp.LogStartOffset, RecordBytes: len(sp.RecordBatches)}
			k++
		}
	}
	if k != len(answered) {
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
	k, topics := 0, resp.Topics[:0]
	for _, st := range resp.Topics {
		parts := st.Partitions[:0]
		for _, sp := range st.Partitions {
			if keep[answered[k]] {
				parts = append(parts, sp)
			}
			k++
		}
		if len(parts) > 0 {
			st.Partitions = parts
			topics = append(topics, st)
		}
	}
	resp.Topics = topics
}
