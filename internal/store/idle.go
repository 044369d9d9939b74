package store

// Idle reports whether the store has no background work running or
// queued: no fold of a shard's log, no pebble flush or compaction. A
// closed store is idle. Benchmarks wait for it, so that work left over
// from groupd's measured window does not run in the next one.
func (p *Pebble) Idle() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return true
	}
	for i := range p.logs {
		l := &p.logs[i]
		l.mu.Lock()
		folding := l.folding
		l.mu.Unlock()
		if folding {
			return false
		}
	}
	m := p.db.Metrics()
	return m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0
}
