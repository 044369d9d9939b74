package server

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// epoller watches parked connections with an epoll instance of its own.
// Each parked socket is registered one-shot: its first event disables it
// until the connection parks again. The epoll descriptor is itself waited
// on through the runtime's network poller, so the poller's goroutine
// holds no thread while nothing happens.
type epoller struct {
	srv   *Server
	epfd  int
	file  *os.File
	conns parkedConns
	done  chan struct{}
	// closing is set before close closes the file, whose error then
	// ends run quietly.
	closing atomic.Bool
}

func newPoller(s *Server) (poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the runtime's poller.
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("epoll: %w", err)
	}
	p := &epoller{srv: s, epfd: epfd, file: f, done: make(chan struct{})}
	go p.run(rc)
	return p, nil
}

// maxPollerWait bounds each wait of the poller. It only matters if a
// readiness notification of the epoll descriptor were ever lost: the
// parked connections would then wait at most this long.
const maxPollerWait = time.Second

const parkEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func (p *epoller) arm(c *conn, fd int) error {
	op := syscall.EPOLL_CTL_MOD
	if !c.park.armed {
		p.conns.add(c)
		op = syscall.EPOLL_CTL_ADD
	}
	ev := syscall.EpollEvent{Events: parkEvents, Fd: int32(c.park.id)}
	if err := syscall.EpollCtl(p.epfd, op, fd, &ev); err != nil {
		if !c.park.armed {
			p.conns.remove(c)
		}
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	c.park.armed = true
	return nil
}

func (p *epoller) disarm(c *conn, fd int) {
	if fd >= 0 {
		syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	}
	p.conns.remove(c)
	c.park.armed = false
}

// run resumes connections as their sockets become readable, and sweeps
// out idle ones every sweepInterval, until close.
func (p *epoller) run(rc syscall.RawConn) {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	var ready []uint32
	idle := p.srv.cfg.IdleTimeout
	sweepAt := time.Now().Add(sweepInterval(idle))
	for {
		wakeAt := time.Now().Add(maxPollerWait)
		if idle > 0 && sweepAt.Before(wakeAt) {
			wakeAt = sweepAt
		}
		p.file.SetReadDeadline(wakeAt)
		ready = ready[:0]
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			n, err := syscall.EpollWait(int(fd), events, 0)
			for errors.Is(err, syscall.EINTR) {
				n, err = syscall.EpollWait(int(fd), events, 0)
			}
			if err == nil && n == 0 {
				return false // wait until the epoll descriptor is readable
			}
			if err != nil {
				werr = err
				return true
			}
			for _, ev := range events[:n] {
				ready = append(ready, uint32(ev.Fd))
			}
			return true
		})
		if err == nil {
			err = werr
		}
		for _, id := range ready {
			if c := p.conns.get(id); c != nil {
				c.unpark(true)
			}
		}
		if idle > 0 && !time.Now().Before(sweepAt) {
			p.conns.sweep(p.srv.now(), idle)
			sweepAt = time.Now().Add(sweepInterval(idle))
		}
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case p.closing.Load():
			return
		default:
			// Connections go back to a goroutine each, parked or not.
			p.srv.log.Error("cannot watch parked connections; connections no longer park", "err", err)
			p.srv.pollerFailed.Store(true)
			p.conns.unparkAll()
			return
		}
	}
}

func (p *epoller) close() {
	p.closing.Store(true)
	p.file.Close()
	<-p.done
}
