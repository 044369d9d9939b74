package cluster

import "time"

// network carries messages between nodes, and between clients and nodes,
// with seeded delays. Every (sender, receiver) pair is one TCP connection:
// its messages arrive in the order they were sent; messages on different
// connections may overtake each other. A cut between two nodes loses what
// is sent while it lasts and what is still on the wire when it starts (a
// request lost this way is answered by its sender's timeout). Clients are
// never cut off; a node that is down or paused is handled by the receiving
// side (proc.run).
type network struct {
	w    *world
	cut  map[[2]int32]bool      // unordered node pairs, low id first
	last map[[2]int32]time.Time // per directed connection: last delivery
}

func newNetwork(w *world) *network {
	return &network{w: w, cut: map[[2]int32]bool{}, last: map[[2]int32]time.Time{}}
}

func pair(a, b int32) [2]int32 {
	if a > b {
		a, b = b, a
	}
	return [2]int32{a, b}
}

// isCut reports whether a and b cannot talk (clients, whose ids are
// negative, always can).
func (n *network) isCut(a, b int32) bool {
	if a <= 0 || b <= 0 || a == b {
		return false
	}
	return n.cut[pair(a, b)]
}

// delay draws one message's time on the wire.
func (n *network) delay() time.Duration {
	w := n.w
	if w.chance(w.p.netSpike) {
		return w.between(2*time.Millisecond, 60*time.Millisecond)
	}
	return w.between(100*time.Microsecond, 2*time.Millisecond)
}

// send carries deliver from one endpoint to another; it runs at the
// receiver, unless the two are cut off at sending or at delivery.
func (n *network) send(from, to int32, deliver func()) {
	w := n.w
	if n.isCut(from, to) {
		w.count("run.net.lost")
		return
	}
	k := [2]int32{from, to}
	at := w.now.Add(n.delay())
	if l := n.last[k]; at.Before(l) {
		at = l
	}
	n.last[k] = at
	w.schedule(at, func() {
		if n.isCut(from, to) {
			w.count("run.net.lost")
			return
		}
		deliver()
	})
}
