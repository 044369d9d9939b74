// Package fetchsession keeps incremental fetch sessions (KIP-227): a
// consumer that fetches many partitions names them all once, and from then
// on its requests list only the partitions whose fetch position changed,
// and the broker's replies carry only the partitions that have something
// to say (records, a moved high watermark or log start offset, an error).
//
// The cache follows Kafka's FetchSession.scala transition for transition:
// the session epoch in a request decides between a fetch outside any
// session (-1, which also closes a session it names), a full fetch that
// opens a session (0), and an incremental fetch on an open one (> 0), with
// FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH and
// FETCH_SESSION_TOPIC_ID_ERROR where Kafka answers them, and Kafka's
// eviction rule when it is full. A session is also freed when the
// connection that last used it closes: real clients start a new session
// on a new connection, so such a session could only hold a slot.
//
// The cache is pure: the time is an argument, session ids come from a
// generator given in Config, and nothing depends on map iteration order.
// Its methods are safe for concurrent use; each holds the cache's lock
// only for its own bookkeeping, never while partitions are read.
package fetchsession

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Session ids and epochs with a meaning of their own (Kafka's
// FetchMetadata).
const (
	// NoSession is the session id of a fetch outside any session.
	NoSession int32 = 0
	// InitialEpoch asks for a full fetch that opens a new session.
	InitialEpoch int32 = 0
	// FinalEpoch asks for a full fetch outside any session.
	FinalEpoch int32 = -1
)

// Kafka's defaults: max.incremental.fetch.session.cache.slots, and the
// time a session is protected from eviction after it is created or used
// (MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).
const (
	DefaultMaxSessions = 1000
	DefaultEvictionAge = 2 * time.Minute
)

// Key names a partition the way the request does: by topic id from Fetch
// v13 on, by topic name before (the other field is zero).
type Key struct {
	TopicID   [16]byte
	Topic     string
	Partition int32
}

// Params is what a fetch asks of one partition; a session remembers them
// so that an incremental request need not repeat them.
type Params struct {
	FetchOffset        int64
	LogStartOffset     int64
	MaxBytes           int32
	CurrentLeaderEpoch int32
	LastFetchedEpoch   int32
}

// Part is one partition of a fetch with its parameters.
type Part struct {
	Key    Key
	Params Params
}

// Request holds the session fields of a fetch request.
type Request struct {
	// Conn identifies the connection the request came on.
	Conn uint64
	// TopicIDs is set for Fetch v13 and later, which name topics by id.
	TopicIDs  bool
	SessionID int32
	Epoch     int32
	// Parts are the partitions the request names, each once, in the order
	// they are to be answered.
	Parts []Part
	// Forgotten are the partitions an incremental fetch removes from its
	// session.
	Forgotten []Key
}

// Kind says how a fetch is served.
type Kind uint8

const (
	// Sessionless is a full fetch outside any session (epoch -1, or a
	// session emptied by its own request).
	Sessionless Kind = iota
	// Full is a full fetch that opens a session when it is finished, if
	// the cache has or can make room.
	Full
	// Incremental is a fetch on an open session.
	Incremental
	// Failed is a fetch refused with a session error (Fetch.ErrorCode);
	// no partition is read.
	Failed
)

func (k Kind) String() string {
	switch k {
	case Sessionless:
		return "sessionless"
	case Full:
		return "full"
	case Incremental:
		return "incremental"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Fetch is one fetch between Begin and Finish.
type Fetch struct {
	Kind Kind
	// ErrorCode is the session error of a Failed fetch.
	ErrorCode int16
	// Parts are the partitions to read and answer, in order: the
	// request's for a full or sessionless fetch, the whole session's for
	// an incremental one.
	Parts []Part

	req     Request
	session *session
	entries []*entry // the session's entries, aligned with Parts
	told    []told   // what the last reply said of each of Parts
	keep    []bool   // Finish's answer, kept with f for reuse
	epoch   int32    // the session epoch Begin moved the session to
}

// told is what a session's last reply said of a partition, as Begin found
// it: Finish of another fetch on the session may change the entry while
// this fetch reads.
type told struct{ hw, logStart int64 }

// Quiet reports whether an incremental fetch may leave Parts[i] unread,
// given the partition's high watermark and log start offset now: its
// reply would not carry the partition, because the last reply told the
// client this high watermark and log start offset without an error, and
// there are no records past the fetch offset. Kafka reads every partition
// of the session and then drops these (FetchSession.scala,
// CachedPartition.maybeUpdateResponseData); a consumer of many
// partitions of which few move is spared reading the rest. A partition
// without a log, or whose fetch offset is out of range, is never quiet:
// it answers with an error.
func (f *Fetch) Quiet(i int, hw, logStart int64) bool {
	if f.Kind != Incremental {
		return false
	}
	t := f.told[i]
	return t.hw >= 0 && t.hw == hw && t.logStart == logStart && f.Parts[i].Params.FetchOffset == hw
}

// Result is what reading one partition of a fetch gave.
type Result struct {
	// Unread is set for a partition left unread because Quiet said so;
	// the reply does not carry it and the session's view of it stays.
	Unread         bool
	ErrorCode      int16
	HighWatermark  int64
	LogStartOffset int64
	// RecordBytes is the size of the records returned.
	RecordBytes int
}

// Stats counts what the cache holds and has done.
type Stats struct {
	// Sessions and Partitions are the open sessions and the partitions
	// they hold.
	Sessions   int
	Partitions int
	// Created counts sessions opened; NotCreated full fetches that found
	// the cache full of sessions it may not evict.
	Created, NotCreated uint64
	// Evicted counts sessions removed to make room for another; Closed
	// sessions closed by their client (a full fetch naming them, or an
	// incremental fetch forgetting every partition); Dropped sessions
	// freed because their connection closed.
	Evicted, Closed, Dropped uint64
	// Fetches served by kind, and fetches refused with a session error.
	SessionlessFetches, FullFetches, IncrementalFetches, FailedFetches uint64
}

// Config configures a Cache.
type Config struct {
	// MaxSessions bounds the open sessions; 0 is DefaultMaxSessions, and
	// a negative value disables sessions (every full fetch is answered
	// with session id 0, which tells the client to go on without one).
	MaxSessions int
	// EvictionAge is how long a session is protected from eviction after
	// it was created, and how long it must have gone unused to be evicted
	// as stale; 0 is DefaultEvictionAge.
	EvictionAge time.Duration
	// NewID returns a candidate session id; ids that are not positive or
	// already in use are drawn again. Nil draws random ids, as Kafka
	// does: a client holding a session id from before a restart must not
	// land in another client's session.
	NewID func() int32
}

// Cache holds the open fetch sessions.
type Cache struct {
	mu         sync.Mutex
	cfg        Config
	sessions   map[int32]*session
	partitions int
	stats      Stats
}

// New returns an empty cache.
func New(cfg Config) *Cache {
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.EvictionAge <= 0 {
		cfg.EvictionAge = DefaultEvictionAge
	}
	if cfg.NewID == nil {
		cfg.NewID = randomIDs()
	}
	return &Cache{cfg: cfg, sessions: make(map[int32]*session)}
}

// randomIDs draws session ids from a generator seeded from the operating
// system's randomness.
func randomIDs() func() int32 {
	var seed [32]byte
	rand.Read(seed[:])
	r := mrand.New(mrand.NewChaCha8(seed))
	var mu sync.Mutex
	return func() int32 {
		mu.Lock()
		defer mu.Unlock()
		return int32(r.Uint32() >> 1)
	}
}

// SequentialIDs returns a NewID that counts from 1, for tests and
// transcripts.
func SequentialIDs() func() int32 {
	var next int32
	return func() int32 { next++; return next }
}

// nextEpoch is the epoch after e; it wraps to 1, never to 0 or -1.
func nextEpoch(e int32) int32 {
	switch {
	case e < 0:
		return FinalEpoch
	case e == 1<<31-1:
		return 1
	}
	return e + 1
}

// Begin resolves a fetch against the cache: it closes a session a full
// fetch names, or applies an incremental request to its session and moves
// the session to its next epoch. The caller reads Fetch.Parts (unless the
// fetch Failed) and hands the results to Finish.
func (c *Cache) Begin(now time.Time, req Request) *Fetch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Epoch == InitialEpoch || req.Epoch == FinalEpoch {
		if req.SessionID != NoSession {
			// A full fetch closes the session it names, whoever holds it.
			if s := c.sessions[req.SessionID]; s != nil {
				c.remove(s)
				c.stats.Closed++
			}
		}
		if req.Epoch == FinalEpoch {
			c.stats.SessionlessFetches++
			return &Fetch{Kind: Sessionless, Parts: req.Parts, req: req}
		}
		c.stats.FullFetches++
		return &Fetch{Kind: Full, Parts: req.Parts, req: req}
	}
	s := c.sessions[req.SessionID]
	var code int16
	switch {
	case s == nil:
		code = kerr.FetchSessionIDNotFound.Code
	case s.epoch != req.Epoch:
		code = kerr.InvalidFetchSessionEpoch.Code
	case s.topicIDs != req.TopicIDs:
		// A session opened with topic ids cannot go on by name, nor the
		// other way round.
		code = kerr.FetchSessionTopicIDError.Code
	}
	if code != 0 {
		c.stats.FailedFetches++
		return &Fetch{Kind: Failed, ErrorCode: code, req: req}
	}
	s.update(req.Parts, req.Forgotten)
	if len(s.parts) == 0 {
		// Nothing left to fetch: the session ends and the request is
		// answered as a fetch outside any session.
		c.remove(s)
		c.stats.Closed++
		c.stats.SessionlessFetches++
		return &Fetch{Kind: Sessionless, Parts: req.Parts, req: req}
	}
	c.touch(s, now)
	s.epoch = nextEpoch(s.epoch)
	s.conn = req.Conn
	f := incrementalFetches.Get().(*Fetch)
	f.Kind, f.req, f.session, f.epoch = Incremental, req, s, s.epoch
	for e := s.order.next; e != &s.order; e = e.next {
		f.Parts = append(f.Parts, Part{e.key, e.params})
		f.entries = append(f.entries, e)
		f.told = append(f.told, told{e.hw, e.logStart})
	}
	c.stats.IncrementalFetches++
	return f
}

// incrementalFetches keeps the Fetch values of incremental fetches, whose
// copies of a session's partitions are the same size fetch after fetch
// and would otherwise be allocated anew for each (see Release).
var incrementalFetches = sync.Pool{New: func() any { return new(Fetch) }}

// Release gives f's memory back for later fetches, once its caller is
// done with f and its Parts.
func (c *Cache) Release(f *Fetch) {
	if f.Kind != Incremental {
		return // Parts are the caller's own
	}
	clear(f.entries) // a closed session's entries need not live on
	*f = Fetch{Parts: f.Parts[:0], entries: f.entries[:0], told: f.told[:0], keep: f.keep[:0]}
	incrementalFetches.Put(f)
}

// Finish completes a fetch with what was read for each of its Parts
// (results[i] for Parts[i]). It returns the session id and top-level error
// code to answer with, and, for an incremental fetch, which partitions the
// reply carries (keep[i] for Parts[i], valid until Release); a nil keep
// carries them all.
func (c *Cache) Finish(now time.Time, f *Fetch, results []Result) (sessionID int32, errorCode int16, keep []bool) {
	switch f.Kind {
	case Failed:
		return NoSession, f.ErrorCode, nil
	case Sessionless:
		return NoSession, 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.Kind == Full {
		return c.create(now, f, results), 0, nil
	}
	s := f.session
	if s.epoch != f.epoch {
		// Another request moved the session on while this one was read
		// (a duplicate request): this one's view of it is stale.
		return s.id, kerr.InvalidFetchSessionEpoch.Code, make([]bool, len(f.Parts))
	}
	keep = f.keep[:0]
	for range f.Parts {
		keep = append(keep, false)
	}
	f.keep = keep
	for i, e := range f.entries {
		if results[i].Unread {
			continue
		}
		keep[i] = e.respond(results[i])
		if results[i].RecordBytes > 0 {
			// A partition that returned records goes to the back, so
			// that under fetch.max.bytes every partition gets its turn.
			s.moveToBack(e)
		}
	}
	return s.id, 0, keep
}

// create opens a session for a full fetch, evicting another if the cache
// is full and Kafka's rule allows it; it returns the new session's id, or
// NoSession.
func (c *Cache) create(now time.Time, f *Fetch, results []Result) int32 {
	if c.cfg.MaxSessions < 0 || (len(c.sessions) >= c.cfg.MaxSessions && !c.tryEvict(len(f.Parts), now)) {
		c.stats.NotCreated++
		return NoSession
	}
	s := &session{id: c.newID(), conn: f.req.Conn, topicIDs: f.req.TopicIDs, epoch: nextEpoch(InitialEpoch),
		created: now, size: -1, parts: make(map[Key]*entry, len(f.Parts))}
	s.order.next, s.order.prev = &s.order, &s.order
	for i, p := range f.Parts {
		e := s.parts[p.Key]
		if e == nil {
			e = s.add(p)
		}
		e.params = p.Params
		e.hw, e.logStart = results[i].HighWatermark, results[i].LogStartOffset
	}
	c.sessions[s.id] = s
	c.touch(s, now)
	c.stats.Created++
	return s.id
}

func (c *Cache) newID() int32 {
	for {
		id := c.cfg.NewID()
		if _, used := c.sessions[id]; id > 0 && !used {
			return id
		}
	}
}

// tryEvict makes room for a session of size partitions. As in Kafka's
// FetchSessionCacheShard.tryEvict, the session used least recently goes
// if it has been unused for longer than the eviction age; otherwise the
// smallest session old enough to be evictable (lowest id first among
// equals) goes if the new session has more partitions. Sessions here are
// all consumers' (Kafka's followers' privileged sessions do not arise).
func (c *Cache) tryEvict(size int, now time.Time) bool {
	var lru, smallest *session
	for _, s := range c.sessions {
		if lru == nil || s.lastUsed.Before(lru.lastUsed) || (s.lastUsed.Equal(lru.lastUsed) && s.id < lru.id) {
			lru = s
		}
		if s.evictable && (smallest == nil || s.size < smallest.size || (s.size == smallest.size && s.id < smallest.id)) {
			smallest = s
		}
	}
	var victim *session
	switch {
	case lru == nil:
		return false
	case now.Sub(lru.lastUsed) > c.cfg.EvictionAge:
		victim = lru
	case smallest != nil && size > smallest.size:
		victim = smallest
	default:
		return false
	}
	c.remove(victim)
	c.stats.Evicted++
	return true
}

// touch records a use of s: its last-used time, its size for the
// eviction order, and whether it is old enough to be evicted for a larger
// session, which Kafka too decides when a session is used.
func (c *Cache) touch(s *session, now time.Time) {
	s.lastUsed = now
	if s.size >= 0 {
		c.partitions -= s.size
	}
	s.size = len(s.parts)
	c.partitions += s.size
	s.evictable = now.Sub(s.created) > c.cfg.EvictionAge
}

func (c *Cache) remove(s *session) {
	if c.sessions[s.id] != s {
		return
	}
	delete(c.sessions, s.id)
	c.partitions -= s.size
}

// ConnClosed frees the sessions last used on connection conn.
func (c *Cache) ConnClosed(conn uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sessions {
		if s.conn == conn {
			c.remove(s)
			c.stats.Dropped++
		}
	}
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	st.Sessions, st.Partitions = len(c.sessions), c.partitions
	return st
}

// session is one open fetch session. Its partitions are kept in the order
// they are answered: the order they were added in, except that a
// partition that returned records moves to the back.
type session struct {
	id        int32
	conn      uint64
	topicIDs  bool
	epoch     int32
	created   time.Time
	lastUsed  time.Time
	size      int // partitions at the last touch; -1 before the first
	evictable bool
	parts     map[Key]*entry
	order     entry // sentinel of the ring of entries
}

// entry is one partition of a session: the parameters last asked for and
// what the last reply said of it.
type entry struct {
	key          Key
	params       Params
	hw, logStart int64 // -1 until a reply carried them
	prev, next   *entry
}

func (s *session) add(p Part) *entry {
	e := &entry{key: p.Key, params: p.Params, hw: -1, logStart: -1}
	s.parts[p.Key] = e
	s.link(e)
	return e
}

func (s *session) link(e *entry) {
	e.prev, e.next = s.order.prev, &s.order
	s.order.prev.next = e
	s.order.prev = e
}

func (s *session) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *session) moveToBack(e *entry) {
	if e.next == nil || s.parts[e.key] != e {
		return // forgotten meanwhile
	}
	s.unlink(e)
	s.link(e)
}

// update applies an incremental request: named partitions are added (at
// the back) or have their parameters replaced; forgotten ones are removed.
func (s *session) update(parts []Part, forgotten []Key) {
	for _, p := range parts {
		if e := s.parts[p.Key]; e != nil {
			e.params = p.Params
			continue
		}
		s.add(p)
	}
	for _, k := range forgotten {
		if e := s.parts[k]; e != nil {
			delete(s.parts, k)
			s.unlink(e)
		}
	}
}

// respond reports whether an incremental reply must carry the partition,
// and remembers what it carries: records, a changed high watermark or log
// start offset, or an error (after which the high watermark is forgotten,
// so the partition is answered again once the error is gone).
func (e *entry) respond(r Result) bool {
	must := r.RecordBytes > 0
	if e.hw != r.HighWatermark {
		must = true
		e.hw = r.HighWatermark
	}
	if e.logStart != r.LogStartOffset {
		must = true
		e.logStart = r.LogStartOffset
	}
	if r.ErrorCode != 0 {
		must = true
		e.hw = -1
	}
	return must
}
