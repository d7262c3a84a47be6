// perftest: a load program on RabbitMQ's Go client (amqp091-go), in the spirit
// of RabbitMQ's PerfTest, for compat-tests/bench/compare.sh --real-clients.
//
// Each producer and each consumer has a connection and a channel of its own.
// A producer publishes with one library call per message (the library writes the
// method, header and body frames and flushes them: one socket write per
// publish), keeping at most -confirm unconfirmed; confirms come back through
// NotifyPublish. A consumer sets basic.qos -prefetch and acks with multiple=true
// every -multi-ack messages (or uses auto-ack). Each body starts with its send
// time (8 octets, Unix nanoseconds), so consumers measure end-to-end latency.
//
// The run lasts -duration seconds after every connection is set up; rates are
// counts over that time. The result is one JSON line on stdout, with the field
// names of `stablemq perf --json` (published, confirmed, consumed, their rates,
// confirm_latency_us and e2e_latency_us with p50/p99 in microseconds, errors,
// settings). Exit status 1 if anything failed.
//
// Build (GOPATH mode against Debian's golang-github-rabbitmq-amqp091-go-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o perftest-go perftest.go
//
// Stream queues (compare.sh's ST2 rows): with -queue-type stream the queue is
// declared durable and never purged (a stream cannot be), -offset first
// consumes with the x-stream-offset argument, and -count N makes each consumer
// stop after N messages. With -count, consumers subscribe only once the clock
// has started, the phase ends when the last consumer has its N (-duration is
// then the time limit: a consumer short of N is an error and timed_out), and
// the rates are over the time from the start to that end.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type config struct {
	uri        string
	producers  int
	consumers  int
	size       int
	persistent bool
	confirm    int
	prefetch   int
	multiAck   int
	autoAck    bool
	rate       float64
	duration   time.Duration
	queue      string
	queueType  string
	offset     string
	count      int
}

type latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

type settings struct {
	Client         string  `json:"client"`
	Producers      int     `json:"producers"`
	Consumers      int     `json:"consumers"`
	BodySize       int     `json:"body_size"`
	Persistent     bool    `json:"persistent"`
	ConfirmWindow  int     `json:"confirm_window"`
	Prefetch       int     `json:"prefetch"`
	MultiAckEvery  int     `json:"multi_ack_every"`
	AutoAck        bool    `json:"auto_ack"`
	RatePerProd    float64 `json:"rate_per_producer,omitempty"`
	DurationS      float64 `json:"duration_s"`
	Queue          string  `json:"queue"`
	QueueType      string  `json:"queue_type,omitempty"`
	Offset         string  `json:"offset,omitempty"`
	Count          int     `json:"count,omitempty"`
	FramesPerWrite int     `json:"frames_per_write"`
}

type report struct {
	Settings    settings `json:"settings"`
	ElapsedS    float64  `json:"elapsed_s"`
	TimedOut    bool     `json:"timed_out"`
	Errors      []string `json:"errors"`
	Published   uint64   `json:"published"`
	Confirmed   uint64   `json:"confirmed"`
	Nacked      uint64   `json:"nacked"`
	Consumed    uint64   `json:"consumed"`
	PublishRate float64  `json:"publish_rate"`
	ConfirmRate float64  `json:"confirm_rate"`
	ConsumeRate float64  `json:"consume_rate"`
	ConfirmLat  *latency `json:"confirm_latency_us"`
	E2ELat      *latency `json:"e2e_latency_us"`
}

type run struct {
	cfg       config
	start     time.Time
	deadline  time.Time
	published uint64
	confirmed uint64
	nacked    uint64
	consumed  uint64
	mu        sync.Mutex
	errors    []string
	confirmNs []int64
	e2eNs     []int64
	lastDone  int64 // -count: when the last consumer got its N (Unix ns)
	short     int32 // -count: consumers that did not get N in time
}

func (r *run) fail(format string, a ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}

func (r *run) addLatencies(confirm, e2e []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confirmNs = append(r.confirmNs, confirm...)
	r.e2eNs = append(r.e2eNs, e2e...)
}

func percentiles(ns []int64) *latency {
	if len(ns) == 0 {
		return nil
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(ns)-1))
		return float64(ns[i]) / 1000
	}
	return &latency{Count: uint64(len(ns)), P50: at(0.50), P99: at(0.99), Max: float64(ns[len(ns)-1]) / 1000}
}

func setup(cfg config) error {
	conn, err := amqp.Dial(cfg.uri)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("setup channel: %w", err)
	}
	args := amqp.Table{}
	if cfg.queueType != "" {
		args["x-queue-type"] = cfg.queueType
	}
	durable := cfg.persistent || cfg.queueType == "quorum" || cfg.queueType == "stream"
	if _, err := ch.QueueDeclare(cfg.queue, durable, false, false, false, args); err != nil {
		return fmt.Errorf("queue.declare %s: %w", cfg.queue, err)
	}
	if cfg.queueType == "stream" {
		return nil // a stream cannot be purged; its readers pick their offset
	}
	if _, err := ch.QueuePurge(cfg.queue, false); err != nil {
		return fmt.Errorf("queue.purge %s: %w", cfg.queue, err)
	}
	return nil
}

// producer publishes until the deadline, at most cfg.confirm unconfirmed.
func (r *run) producer(ch *amqp.Channel, ready *sync.WaitGroup, goSignal <-chan struct{}) {
	cfg := r.cfg
	var confirms chan amqp.Confirmation
	if cfg.confirm > 0 {
		if err := ch.Confirm(false); err != nil {
			r.fail("confirm.select: %v", err)
			ready.Done()
			return
		}
		confirms = ch.NotifyPublish(make(chan amqp.Confirmation, cfg.confirm+1))
	}
	ready.Done()
	<-goSignal
	body := make([]byte, cfg.size)
	mode := amqp.Transient
	if cfg.persistent {
		mode = amqp.Persistent
	}
	var sent []int64 // send time of delivery tag i+1
	var lat []int64
	var seq, done uint64
	var interval time.Duration
	if cfg.rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.rate)
	}
	ctx := context.Background()
	end := time.NewTimer(time.Until(r.deadline))
	defer end.Stop()
	take := func(c amqp.Confirmation) {
		now := time.Now().UnixNano()
		if c.DeliveryTag >= 1 && c.DeliveryTag <= uint64(len(sent)) {
			if c.Ack {
				if now <= r.deadline.UnixNano() {
					atomic.AddUint64(&r.confirmed, 1)
				}
				lat = append(lat, now-sent[c.DeliveryTag-1])
			} else {
				atomic.AddUint64(&r.nacked, 1)
			}
		}
		done++
	}
	for {
		now := time.Now()
		if !now.Before(r.deadline) {
			break
		}
		if confirms != nil && seq-done >= uint64(cfg.confirm) {
			select {
			case c, ok := <-confirms:
				if !ok {
					r.fail("the channel closed while waiting for confirms")
					r.addLatencies(lat, nil)
					return
				}
				take(c)
			case <-end.C:
			}
			continue
		}
		if interval > 0 {
			due := r.start.Add(time.Duration(seq) * interval)
			if due.After(now) {
				time.Sleep(due.Sub(now))
				continue
			}
		}
		t := time.Now().UnixNano()
		if len(body) >= 8 {
			binary.BigEndian.PutUint64(body, uint64(t))
		}
		err := ch.PublishWithContext(ctx, "", cfg.queue, false, false, amqp.Publishing{
			DeliveryMode: mode,
			Body:         body,
		})
		if err != nil {
			r.fail("basic.publish: %v", err)
			break
		}
		seq++
		sent = append(sent, t)
		atomic.AddUint64(&r.published, 1)
		// Take the confirms that have come in, without waiting.
		for confirms != nil {
			select {
			case c := <-confirms:
				take(c)
				continue
			default:
			}
			break
		}
	}
	r.addLatencies(lat, nil)
}

// consumer consumes until the deadline.
func (r *run) consumer(ch *amqp.Channel, ready *sync.WaitGroup, goSignal <-chan struct{}) {
	cfg := r.cfg
	if cfg.prefetch > 0 {
		if err := ch.Qos(cfg.prefetch, 0, false); err != nil {
			r.fail("basic.qos: %v", err)
			ready.Done()
			return
		}
	}
	var args amqp.Table
	if cfg.offset != "" {
		args = amqp.Table{"x-stream-offset": cfg.offset}
	}
	subscribe := func() (<-chan amqp.Delivery, error) {
		return ch.Consume(cfg.queue, "", cfg.autoAck, false, false, false, args)
	}
	var deliveries <-chan amqp.Delivery
	var err error
	if cfg.count == 0 {
		deliveries, err = subscribe()
	}
	ready.Done()
	if err != nil {
		r.fail("basic.consume: %v", err)
		return
	}
	<-goSignal
	if cfg.count > 0 {
		// Reading a backlog: nothing is delivered before the clock starts.
		if deliveries, err = subscribe(); err != nil {
			r.fail("basic.consume: %v", err)
			return
		}
	}
	var lat []int64
	got := 0
	unacked := 0
	timer := time.NewTimer(time.Until(r.deadline))
	defer timer.Stop()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				r.fail("the consumer's channel closed")
				r.addLatencies(nil, lat)
				return
			}
			now := time.Now().UnixNano()
			if now <= r.deadline.UnixNano() {
				atomic.AddUint64(&r.consumed, 1)
			}
			if len(d.Body) >= 8 {
				if t := int64(binary.BigEndian.Uint64(d.Body)); t >= r.start.UnixNano() {
					lat = append(lat, now-t)
				}
			}
			got++
			if !cfg.autoAck {
				unacked++
				if unacked >= cfg.multiAck || got == cfg.count {
					if err := d.Ack(true); err != nil {
						r.fail("basic.ack: %v", err)
					}
					unacked = 0
				}
			}
			if got == cfg.count {
				r.finished(now)
				r.addLatencies(nil, lat)
				return
			}
		case <-timer.C:
			if cfg.count > 0 {
				atomic.AddInt32(&r.short, 1)
				r.fail("a consumer read %d of %d messages within %v", got, cfg.count, cfg.duration)
			}
			r.addLatencies(nil, lat)
			return
		}
	}
}

// finished records that a consumer has its -count messages, at now (Unix ns).
func (r *run) finished(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now > r.lastDone {
		r.lastDone = now
	}
}

func main() {
	var cfg config
	var durationS float64
	flag.StringVar(&cfg.uri, "uri", "amqp://guest:guest@127.0.0.1:5672/", "broker URI")
	flag.IntVar(&cfg.producers, "producers", 1, "producers, each with its own connection")
	flag.IntVar(&cfg.consumers, "consumers", 1, "consumers, each with its own connection")
	flag.IntVar(&cfg.size, "size", 16, "message body size in octets")
	flag.BoolVar(&cfg.persistent, "persistent", false, "persistent messages and a durable queue")
	flag.IntVar(&cfg.confirm, "confirm", 0, "confirm window per producer (0 = no confirms)")
	flag.IntVar(&cfg.prefetch, "prefetch", 0, "consumer prefetch (0 = none)")
	flag.IntVar(&cfg.multiAck, "multi-ack", 1, "ack with multiple=true every this many messages")
	flag.BoolVar(&cfg.autoAck, "auto-ack", false, "consumers use automatic acknowledgement")
	flag.Float64Var(&cfg.rate, "rate", 0, "messages per second per producer (0 = as fast as possible)")
	flag.Float64Var(&durationS, "duration", 10, "seconds to run")
	flag.StringVar(&cfg.queue, "queue", "perftest-go", "queue name")
	flag.StringVar(&cfg.queueType, "queue-type", "", "x-queue-type argument (e.g. quorum, stream)")
	flag.StringVar(&cfg.offset, "offset", "", "x-stream-offset consumer argument (e.g. first; stream queues)")
	flag.IntVar(&cfg.count, "count", 0, "each consumer stops after this many messages (0 = run for -duration)")
	flag.Parse()
	if cfg.producers < 0 || cfg.consumers < 0 || cfg.producers+cfg.consumers == 0 || cfg.size < 0 ||
		cfg.confirm < 0 || cfg.prefetch < 0 || cfg.prefetch > 65535 || cfg.multiAck < 1 ||
		durationS <= 0 || cfg.rate < 0 || cfg.count < 0 || (cfg.count > 0 && cfg.producers > 0) {
		fmt.Fprintln(os.Stderr, "perftest: bad arguments (see -help)")
		os.Exit(2)
	}
	cfg.duration = time.Duration(durationS * float64(time.Second))
	rep := report{Errors: []string{}, Settings: settings{
		Client: "amqp091-go", Producers: cfg.producers, Consumers: cfg.consumers,
		BodySize: cfg.size, Persistent: cfg.persistent, ConfirmWindow: cfg.confirm,
		Prefetch: cfg.prefetch, MultiAckEvery: cfg.multiAck, AutoAck: cfg.autoAck,
		RatePerProd: cfg.rate, DurationS: durationS, Queue: cfg.queue, QueueType: cfg.queueType,
		Offset: cfg.offset, Count: cfg.count, FramesPerWrite: 1,
	}}
	os.Exit(execute(cfg, &rep))
}

func execute(cfg config, rep *report) int {
	out := func() int {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
		if len(rep.Errors) > 0 {
			return 1
		}
		return 0
	}
	if err := setup(cfg); err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		return out()
	}
	r := &run{cfg: cfg}
	var conns []*amqp.Connection
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func() (*amqp.Channel, error) {
		c, err := amqp.Dial(cfg.uri)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		return c.Channel()
	}
	var ready, finished sync.WaitGroup
	goSignal := make(chan struct{})
	for i := 0; i < cfg.consumers; i++ {
		ch, err := open()
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("consumer %d: %v", i, err))
			return out()
		}
		ready.Add(1)
		finished.Add(1)
		go func() { defer finished.Done(); r.consumer(ch, &ready, goSignal) }()
	}
	for i := 0; i < cfg.producers; i++ {
		ch, err := open()
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("producer %d: %v", i, err))
			return out()
		}
		ready.Add(1)
		finished.Add(1)
		go func() { defer finished.Done(); r.producer(ch, &ready, goSignal) }()
	}
	// Every connection is set up (confirm.select, basic.qos, basic.consume)
	// before the clock starts.
	ready.Wait()
	r.start = time.Now()
	r.deadline = r.start.Add(cfg.duration)
	close(goSignal)
	finished.Wait()
	elapsed := cfg.duration.Seconds()
	rep.ElapsedS = time.Since(r.start).Seconds()
	if cfg.count > 0 {
		rep.TimedOut = r.short > 0
		if r.short == 0 && r.lastDone > 0 {
			elapsed = float64(r.lastDone-r.start.UnixNano()) / 1e9
		}
	}
	rep.Published, rep.Confirmed = atomic.LoadUint64(&r.published), atomic.LoadUint64(&r.confirmed)
	rep.Nacked, rep.Consumed = atomic.LoadUint64(&r.nacked), atomic.LoadUint64(&r.consumed)
	rep.PublishRate = float64(rep.Published) / elapsed
	rep.ConfirmRate = float64(rep.Confirmed) / elapsed
	rep.ConsumeRate = float64(rep.Consumed) / elapsed
	if cfg.confirm > 0 {
		rep.ConfirmLat = percentiles(r.confirmNs)
	}
	rep.E2ELat = percentiles(r.e2eNs)
	rep.Errors = append(rep.Errors, r.errors...)
	return out()
}
