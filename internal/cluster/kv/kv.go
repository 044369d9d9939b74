// Package kv is the small part of etcd that groupd's cluster mode needs:
// reads, prefix listings, all-or-nothing transactions that compare
// revisions, watches from a revision, and leases whose holder knows,
// conservatively, until when its lease is certainly still alive.
//
// Every agreement in a cluster (who is alive, who is the controller, who
// leads a partition at which epoch) is a key in etcd, changed only by a
// transaction that compares the revision it was decided at. Keeping the
// interface this small lets the same code run over real etcd (package
// etcdkv) and over a deterministic in-memory model of it in virtual time
// (package kvmodel), and lets one conformance suite (package kvtest) hold
// both to the same semantics.
package kv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// KV is a linearizable key/value store with etcd's revision semantics.
//
// Revisions: the store has one revision counter. Every transaction that
// changes at least one key increments it by exactly one, and every key it
// changed gets that revision as its ModRevision. A transaction that changes
// nothing (its conditions failed, or it only deleted absent keys) leaves
// the revision where it was.
//
// Every method may fail with an error when the store cannot be reached; a
// failed Txn may or may not have been applied (the answer can be lost after
// the store applied it), so a writer re-reads before it retries.
type KV interface {
	// Get reads one key. found is false when the key does not exist; the
	// read is linearizable (it sees every transaction that completed
	// before Get was called).
	Get(ctx context.Context, key string) (v Value, found bool, err error)

	// List reads every key that starts with prefix, in ascending key order,
	// as of one revision, which it returns. A caller that wants to follow
	// the prefix from there watches from revision+1.
	List(ctx context.Context, prefix string) (vs []Value, revision int64, err error)

	// Txn applies ops, in order, if and only if every cond holds; all of
	// them or none take effect. ok reports whether the conditions held.
	// revision is the store's revision after the transaction: the one it
	// wrote at when it changed something, else the current one.
	//
	// The store refuses the whole transaction with an error (nothing
	// applied) when: a key is empty (ErrEmptyKey); a key is put twice, or
	// put and covered by a delete (ErrDuplicateKey); there are more than
	// 128 conds or ops (ErrTooManyOps, etcd's default --max-txn-ops); or
	// the conditions held and a Put names a lease that does not exist
	// (ErrLeaseNotFound).
	Txn(ctx context.Context, conds []Cond, ops []Op) (ok bool, revision int64, err error)

	// Watch follows every change to keys that start with prefix, from
	// fromRevision on (0: from the next change). It delivers one
	// WatchEvent per revision, in revision order, with every change that
	// revision made under the prefix, and no revision twice.
	//
	// The watch ends when ctx ends (the channel is closed, no event with
	// Err is sent) or when it breaks: fromRevision was compacted away
	// (ErrCompacted), or the store cancelled the watch; then one last
	// event carries Err and the channel is closed. A caller whose watch
	// broke lists again and watches from the listing's revision+1. A
	// watch does not break because the connection was lost for a while:
	// it resumes where it was, or breaks with ErrCompacted if its place
	// was compacted meanwhile.
	Watch(ctx context.Context, prefix string, fromRevision int64) <-chan WatchEvent

	// Grant creates a lease of at least ttl (etcd counts whole seconds and
	// has a minimum TTL; the Lease says what was granted) and keeps it
	// alive until it is lost or revoked. Keys put with the lease are
	// deleted, in one revision, when the store expires or revokes it.
	Grant(ctx context.Context, ttl time.Duration) (Lease, error)
}

// Lease is a lease the caller holds and keeps alive.
//
// Its Deadline is conservative: the local time at which the last answered
// keep-alive (or the grant) was SENT, plus the TTL the answer gave. The
// store starts the TTL when it receives the request, after it was sent, so
// it cannot expire the lease before Deadline (assuming the two clocks run
// at the same rate; a holder keeps a margin for that). Past Deadline the
// holder must assume the lease is gone and stop acting on anything it
// gave: other nodes may already be acting on its expiry.
type Lease interface {
	// ID is the lease's id, for Put.
	ID() LeaseID
	// TTL is the time to live the store granted, which may exceed the one
	// asked for.
	TTL() time.Duration
	// Deadline is the instant before which the store cannot have expired
	// the lease. It only moves forward.
	Deadline() time.Time
	// Done is closed when the lease is lost: the Deadline passed without
	// an answered keep-alive moving it, the store answered that the lease
	// no longer exists, or Revoke was called. A lost lease is never kept
	// alive again; the holder grants a new one.
	Done() <-chan struct{}
	// Err says why the lease was lost (ErrLeaseExpired, ErrLeaseRevoked);
	// nil while Done is open.
	Err() error
	// Revoke stops keeping the lease alive, closes Done, and then asks the
	// store to revoke it, which deletes its keys at once. A lease the store
	// no longer knows counts as revoked. If Revoke fails, the lease expires
	// at the latest after its TTL.
	Revoke(ctx context.Context) error
}

// LeaseID names a lease. 0 means no lease.
type LeaseID int64

// Value is a key as the store holds it.
type Value struct {
	Key  string
	Data []byte
	// CreateRevision is the revision that created the key (since its last
	// deletion); ModRevision the revision that last changed it. For a
	// deleted key in a WatchEvent, ModRevision is the revision of the
	// deletion and the other fields are zero.
	CreateRevision int64
	ModRevision    int64
	// Lease is the lease the key is attached to, 0 if none.
	Lease LeaseID
}

// CondTarget is the revision a Cond compares.
type CondTarget int

const (
	// ModRevision compares the revision that last changed the key.
	ModRevision CondTarget = iota + 1
	// CreateRevision compares the revision that created the key.
	CreateRevision
)

// Cond holds when the key's Target revision equals Revision. An absent key
// has both revisions 0.
type Cond struct {
	Key      string
	Target   CondTarget
	Revision int64
}

// ModRevisionIs holds when key was last changed at rev (0: key is absent).
func ModRevisionIs(key string, rev int64) Cond {
	return Cond{Key: key, Target: ModRevision, Revision: rev}
}

// CreateRevisionIs holds when key was created at rev (0: key is absent).
// Comparing the create revision of a role's key with the one the role was
// granted at fences a holder whose key was deleted and created anew.
func CreateRevisionIs(key string, rev int64) Cond {
	return Cond{Key: key, Target: CreateRevision, Revision: rev}
}

// Absent holds when key does not exist: create-if-absent is
// Txn([Absent(k)], [Put(k, ...)]).
func Absent(key string) Cond { return CreateRevisionIs(key, 0) }

// OpType is what an Op does.
type OpType int

const (
	OpPut OpType = iota + 1
	OpDelete
	OpDeletePrefix
)

// Op is one write of a transaction.
type Op struct {
	Type OpType
	// Key is the key, or the prefix for OpDeletePrefix.
	Key   string
	Data  []byte
	Lease LeaseID
}

// Put writes data to key. With lease 0 the key is attached to no lease (a
// key that was attached to one is detached); else it is deleted when the
// lease ends.
func Put(key string, data []byte, lease LeaseID) Op {
	return Op{Type: OpPut, Key: key, Data: data, Lease: lease}
}

// Delete deletes key; deleting an absent key changes nothing.
func Delete(key string) Op { return Op{Type: OpDelete, Key: key} }

// DeletePrefix deletes every key that starts with prefix, in one op: a
// topic's partition keys go away without running into the limit of ops
// per transaction.
func DeletePrefix(prefix string) Op { return Op{Type: OpDeletePrefix, Key: prefix} }

// ChangeType says whether a Change wrote or deleted its key.
type ChangeType int

const (
	ChangePut ChangeType = iota + 1
	ChangeDelete
)

func (t ChangeType) String() string {
	switch t {
	case ChangePut:
		return "put"
	case ChangeDelete:
		return "delete"
	}
	return fmt.Sprintf("ChangeType(%d)", int(t))
}

// Change is one key changed by a revision.
type Change struct {
	Type  ChangeType
	Value Value
}

// WatchEvent is one revision's changes under a watched prefix, or the end
// of a watch that broke (Err non-nil, no changes; the channel closes next).
type WatchEvent struct {
	Revision int64
	Changes  []Change
	Err      error
}

// Errors. Implementations wrap them, so compare with errors.Is.
var (
	// ErrCompacted: a watch's revision was compacted away. List again.
	ErrCompacted = errors.New("kv: revision compacted")
	// ErrWatchBroken: the store cancelled a watch for another reason (for
	// example the member lost its leader). List again.
	ErrWatchBroken = errors.New("kv: watch broken")
	// ErrLeaseNotFound: the lease does not exist (expired or revoked).
	ErrLeaseNotFound = errors.New("kv: lease not found")
	// ErrLeaseExpired: a Lease's deadline passed, or the store answered a
	// keep-alive saying the lease is gone.
	ErrLeaseExpired = errors.New("kv: lease expired")
	// ErrLeaseRevoked: the holder revoked the Lease.
	ErrLeaseRevoked = errors.New("kv: lease revoked")
	// ErrDuplicateKey: a transaction puts a key twice, or puts a key that
	// one of its deletes covers.
	ErrDuplicateKey = errors.New("kv: duplicate key in transaction")
	// ErrTooManyOps: a transaction has more than MaxTxnOps conds or ops.
	ErrTooManyOps = errors.New("kv: too many operations in transaction")
	// ErrEmptyKey: a key (or a DeletePrefix prefix) is empty.
	ErrEmptyKey = errors.New("kv: empty key")
	// ErrUnavailable: the store could not be reached; the call may or may
	// not have taken effect.
	ErrUnavailable = errors.New("kv: store unavailable")
)

// MaxTxnOps is etcd's default limit (--max-txn-ops) on the number of conds,
// and of ops, in one transaction. groupd keeps to it so that it runs on a
// default etcd.
const MaxTxnOps = 128
