package lab

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// producer writes records at a steady rate, spread over the partitions of
// its topics, and records each one the broker acknowledged.
type producer struct {
	cl     *kgo.Client
	rec    *recorder
	log    *slog.Logger
	rate   int
	size   int
	topics atomic.Pointer[[]string]

	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup
	failed atomic.Int64
	next   uint64
}

func startProducer(cfg Config, rec *recorder, log *slog.Logger, topics []string) (*producer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(splitList(cfg.Bootstrap)...),
		kgo.ClientID("lab-producer"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		// New partitions are picked up within a couple of seconds.
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MetadataMaxAge(2*time.Second),
		kgo.WithLogger(kgoLogger{log, "producer"}),
	)
	if err != nil {
		return nil, err
	}
	p := &producer{cl: cl, rec: rec, log: log, rate: cfg.Rate, size: cfg.RecordBytes, done: make(chan struct{})}
	p.topics.Store(&topics)
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.loop(ctx)
	return p, nil
}

// addTopic makes the producer write to one more topic, from now on.
func (p *producer) addTopic(t string) {
	ts := append(append([]string(nil), *p.topics.Load()...), t)
	p.topics.Store(&ts)
}

// loop produces what the rate owes at every tick, so that a slow tick is
// made up by the next.
func (p *producer) loop(ctx context.Context) {
	defer close(p.done)
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			owed := int64(now.Sub(start).Seconds()*float64(p.rate)) - sent
			topics := *p.topics.Load()
			for range owed {
				p.produce(topics[p.next%uint64(len(topics))], now)
				sent++
			}
		}
	}
}

func (p *producer) produce(topic string, now time.Time) {
	key := p.next
	p.next++
	value := encodeRecord(make([]byte, p.size), key, now)
	r := &kgo.Record{Topic: topic, Key: strconv.AppendUint(nil, key, 10), Value: value}
	p.wg.Add(1)
	// Records in flight when the run stops producing are still owed, so
	// they are not bound to the loop's context.
	p.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		defer p.wg.Done()
		if err != nil {
			// An unacknowledged record is not owed to anyone.
			if p.failed.Add(1) == 1 {
				p.log.Warn("produce failed", "topic", r.Topic, "err", err)
			}
			return
		}
		p.rec.producedRecord(Production{At: p.rec.at(now), TP: TP{r.Topic, r.Partition}, Offset: r.Offset, Key: key})
	})
}

// stop ends production and waits for every record in flight to be
// acknowledged or to fail.
func (p *producer) stop() {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.cl.Flush(ctx); err != nil {
		p.log.Warn("flushing the producer", "err", err)
	}
	p.wg.Wait()
	p.cl.Close()
}

// kgoLogger passes franz-go's warnings and errors to the lab's logger.
type kgoLogger struct {
	log  *slog.Logger
	name string
}

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	l.log.Log(context.Background(), lvl, msg, append([]any{"client", l.name}, kv...)...)
}
