package core

// SplitMix64 returns a splitmix64 stream started at seed: reproducible for
// a seed, unrelated across seeds, which is what member-id generation needs
// (the same ids when a run is replayed, different ones after a restart
// seeded differently).
func SplitMix64(seed uint64) func() uint64 {
	s := seed
	return func() uint64 {
		s += 0x9e3779b97f4a7c15
		return Mix(s)
	}
}

// Mix is splitmix64's finalizer.
func Mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
