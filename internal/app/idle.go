package app

// StoreIdle reports whether the coordinator store has no background work
// (log folds, pebble flushes and compactions) running or queued.
func (a *App) StoreIdle() bool { return a.store.Idle() }
