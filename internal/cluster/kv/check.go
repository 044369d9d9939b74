package kv

import (
	"fmt"
	"strings"
)

// CheckTxn refuses a transaction that etcd would refuse before evaluating
// it (see KV.Txn), and one that etcd would take with a meaning nobody
// intends: a DeletePrefix of "" is a delete of the whole keyspace to etcd's
// client. Both implementations call it first, so that they fail alike.
func CheckTxn(conds []Cond, ops []Op) error {
	if len(conds) > MaxTxnOps || len(ops) > MaxTxnOps {
		return fmt.Errorf("%w: %d conds, %d ops, at most %d each", ErrTooManyOps, len(conds), len(ops), MaxTxnOps)
	}
	for _, c := range conds {
		if c.Key == "" {
			return fmt.Errorf("%w: in a condition", ErrEmptyKey)
		}
		if c.Target != ModRevision && c.Target != CreateRevision {
			return fmt.Errorf("kv: condition on %q has unknown target %d", c.Key, c.Target)
		}
	}
	puts := make(map[string]bool, len(ops))
	var dels []Op
	for _, op := range ops {
		if op.Key == "" {
			return fmt.Errorf("%w: in an op", ErrEmptyKey)
		}
		switch op.Type {
		case OpPut:
			if puts[op.Key] {
				return fmt.Errorf("%w: %q put twice", ErrDuplicateKey, op.Key)
			}
			puts[op.Key] = true
		case OpDelete, OpDeletePrefix:
			dels = append(dels, op)
		default:
			return fmt.Errorf("kv: op on %q has unknown type %d", op.Key, op.Type)
		}
	}
	// Deletes may overlap each other, but not a put (etcd's checkIntervals).
	for _, d := range dels {
		for k := range puts {
			if d.Covers(k) {
				return fmt.Errorf("%w: %q is put and deleted", ErrDuplicateKey, k)
			}
		}
	}
	return nil
}

// Covers reports whether a delete op deletes key.
func (op Op) Covers(key string) bool {
	switch op.Type {
	case OpDelete:
		return key == op.Key
	case OpDeletePrefix:
		return strings.HasPrefix(key, op.Key)
	}
	return false
}
