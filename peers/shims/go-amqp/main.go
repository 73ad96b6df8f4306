// Command shim drives github.com/Azure/go-amqp for the amqp-conformance
// interop harness: JSON-lines commands on stdin, replies and events on stdout
// (see ../README.md). Diagnostics go to stderr only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

const (
	libraryPath      = "github.com/Azure/go-amqp"
	defaultTimeoutMS = 10000
)

type obj = map[string]any

// outcome is the receive command's outcome.
type outcome struct {
	Type               string         `json:"type"`
	Condition          *string        `json:"condition"`
	Description        *string        `json:"description"`
	DeliveryFailed     bool           `json:"delivery_failed"`
	UndeliverableHere  bool           `json:"undeliverable_here"`
	MessageAnnotations map[string]any `json:"message_annotations"`
}

type command struct {
	ID            json.RawMessage `json:"id"`
	Op            string          `json:"op"`
	URL           string          `json:"url"`
	ContainerID   string          `json:"container_id"`
	Hostname      string          `json:"hostname"`
	TimeoutMS     *int64          `json:"timeout_ms"`
	Link          string          `json:"link"`
	Role          string          `json:"role"`
	Address       string          `json:"address"`
	SndSettleMode string          `json:"snd_settle_mode"`
	RcvSettleMode string          `json:"rcv_settle_mode"`
	Messages      []struct {
		Body    *string `json:"body"`
		Settled bool    `json:"settled"`
	} `json:"messages"`
	Count   int      `json:"count"`
	Outcome *outcome `json:"outcome"`
	Settle  *bool    `json:"settle"`
	Close   bool     `json:"close"`
	Drains  bool     `json:"drains"`
	Credit  *int64   `json:"credit"`
}

func (c *command) timeout() time.Duration {
	if c.TimeoutMS == nil || *c.TimeoutMS <= 0 {
		return defaultTimeoutMS * time.Millisecond
	}
	return time.Duration(*c.TimeoutMS) * time.Millisecond
}

// failure is an error reply: {"ok": false, "error": {...}} plus optional extra fields.
type failure struct {
	err   obj
	extra obj
}

func fail(kind, description string) *failure {
	return &failure{err: obj{"kind": kind, "description": description}}
}

func unsupported(description string) *failure    { return fail("unsupported", description) }
func clientErr(format string, a ...any) *failure { return fail("client", fmt.Sprintf(format, a...)) }

func (f *failure) with(k string, v any) *failure {
	if f.extra == nil {
		f.extra = obj{}
	}
	f.extra[k] = v
	return f
}

// classify turns what the library returned into an error reply. bareScope is
// the scope of a bare *amqp.Error that came from the peer at this call
// ("link" for a refused attach, "delivery" for a disposition); "" when a bare
// *amqp.Error at this call is made up by the library itself.
func classify(ctx context.Context, err error, bareScope string) *failure {
	var le *amqp.LinkError
	var se *amqp.SessionError
	var ce *amqp.ConnError
	var ae *amqp.Error
	switch {
	case errors.As(err, &le) && le.RemoteErr != nil:
		return amqpFailure("link", le.RemoteErr)
	case errors.As(err, &se) && se.RemoteErr != nil:
		return amqpFailure("session", se.RemoteErr)
	case errors.As(err, &ce) && ce.RemoteErr != nil:
		return amqpFailure("connection", ce.RemoteErr)
	case errors.Is(err, context.DeadlineExceeded) || (ctx != nil && ctx.Err() != nil):
		return fail("timeout", fmt.Sprintf("%T: %v", err, err))
	case bareScope != "" && errors.As(err, &ae):
		return amqpFailure(bareScope, ae)
	}
	return clientErr("%T: %v", err, err)
}

func amqpFailure(scope string, e *amqp.Error) *failure {
	return &failure{err: obj{"kind": "amqp", "scope": scope, "condition": string(e.Condition), "description": nullIfEmpty(e.Description)}}
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// writer serialises every line written to stdout.
type writer struct {
	mu  sync.Mutex
	out *bufio.Writer
}

func (w *writer) write(v obj) {
	line, err := json.Marshal(v)
	if err != nil {
		log.Printf("cannot encode %#v: %v", v, err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(line)
	w.out.WriteByte('\n')
	w.out.Flush()
}

type link struct {
	sender   *amqp.Sender
	receiver *amqp.Receiver
	ssm      string // snd_settle_mode as requested ("" when not given)
	rsm      string // rcv_settle_mode as requested ("" when not given)
	// manual: a receiver attached with drains, its credit managed by the shim (ReceiverOptions.Credit -1), which
	// DrainCredit needs; granted is the credit the shim has issued that no received message has used, as far as
	// it knows (a drain ends it)
	manual  bool
	granted uint32
}

// connection is one connect ... close cycle.
type connection struct {
	conn    *amqp.Conn
	session *amqp.Session
	links   map[string]*link
	closing atomic.Bool
	ctx     context.Context // cancelled when the shim closes the connection
	cancel  context.CancelFunc
}

type shim struct {
	w    *writer
	c    *connection
	hung string // the call that outlived its deadline in the library, once one has (the shim answers hung since)
}

func main() {
	log.SetOutput(os.Stderr)
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("go-amqp-shim: ")
	s := &shim{w: &writer{out: bufio.NewWriter(os.Stdout)}}
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			s.handle(line)
		}
		if err != nil {
			if err != io.EOF {
				log.Printf("reading stdin: %v", err)
			}
			break
		}
	}
	if s.hung != "" { // the library still holds the call that hung: leave at once rather than wait on it
		log.Printf("end of input with a call still hung (%s): exiting", s.hung)
		return
	}
	if s.c != nil {
		s.c.closing.Store(true)
		s.c.cancel()
		if err := s.c.conn.Close(); err != nil {
			log.Printf("Conn.Close() at end of input: %v", err)
		}
	}
}

func (s *shim) handle(line []byte) {
	var cmd command
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&cmd); err != nil {
		var probe struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(line, &probe)
		s.reply(probe.ID, nil, clientErr("cannot parse command: %v", err))
		return
	}
	shown := bytes.TrimSpace(line)
	if len(shown) > 400 {
		shown = append(shown[:400:400], "..."...)
	}
	log.Printf("> %s", shown)
	if s.hung != "" { // a call still hangs in the library: nothing it holds can be trusted
		s.reply(cmd.ID, nil, fail("hung", "an earlier call still hangs in go-amqp ("+s.hung+"): the shim cannot go on"))
		return
	}
	type result struct {
		res obj
		f   *failure
	}
	done := make(chan result, 1)
	go func() {
		res, f := s.run(&cmd)
		done <- result{res, f}
	}()
	select {
	case r := <-done:
		s.reply(cmd.ID, r.res, r.f)
	case <-time.After(cmd.timeout() + hangGrace):
		// every call below is given the command's deadline (a context, or a timer): one still running past it
		// ignores it, and the library holds whatever it holds
		s.hung = fmt.Sprintf("%s did not return within its %d ms deadline and %d ms more", cmd.Op,
			cmd.timeout().Milliseconds(), hangGrace.Milliseconds())
		log.Printf("hung: %s", s.hung)
		s.reply(cmd.ID, nil, fail("hung", "go-amqp's "+s.hung))
	}
}

// hangGrace is how long past a command's deadline its library call may run before the shim answers hung.
const hangGrace = time.Second

// run carries out one command: the library calls it makes are each given the command's deadline.
func (s *shim) run(cmd *command) (obj, *failure) {
	var (
		res obj
		f   *failure
	)
	switch cmd.Op {
	case "hello":
		res = s.hello()
	case "connect":
		res, f = s.connect(cmd)
	case "attach":
		res, f = s.attach(cmd)
	case "send":
		res, f = s.send(cmd)
	case "receive":
		res, f = s.receive(cmd)
	case "drain":
		res, f = s.drain(cmd)
	case "detach":
		res, f = s.detach(cmd)
	case "close":
		res, f = s.close(cmd)
	default:
		f = clientErr("unknown op %q", cmd.Op)
	}
	return res, f
}

func (s *shim) reply(id json.RawMessage, res obj, f *failure) {
	out := obj{}
	for k, v := range res {
		out[k] = v
	}
	if len(id) == 0 {
		out["id"] = nil
	} else {
		out["id"] = id
	}
	if f != nil {
		for k, v := range f.extra {
			out[k] = v
		}
		out["ok"] = false
		out["error"] = f.err
	} else {
		out["ok"] = true
	}
	s.w.write(out)
}

func libraryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == libraryPath {
				if dep.Replace != nil {
					dep = dep.Replace
				}
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

func (s *shim) hello() obj {
	return obj{"client": "go-amqp", "library": libraryPath, "version": libraryVersion(), "language": "go"}
}

func (s *shim) connect(cmd *command) (obj, *failure) {
	if s.c != nil {
		return nil, clientErr("already connected: close first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	opts := &amqp.ConnOptions{ContainerID: cmd.ContainerID, HostName: cmd.Hostname}
	conn, err := amqp.Dial(ctx, cmd.URL, opts)
	if err != nil {
		return nil, classify(ctx, err, "connection")
	}
	c := &connection{conn: conn, links: map[string]*link{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	s.c = c
	go s.watch(c)
	// go-amqp does not expose the peer's container-id.
	return obj{"remote_container": nil}, nil
}

// watch reports a connection that ends without the shim closing it.
func (s *shim) watch(c *connection) {
	<-c.conn.Done()
	if c.closing.Load() {
		return
	}
	err := c.conn.Err()
	ev := obj{"event": "remote-close", "scope": "connection", "condition": nil, "description": nil,
		"api": fmt.Sprintf("Conn.Done() closed, Conn.Err() = %v", err)}
	var ce *amqp.ConnError
	if errors.As(err, &ce) && ce.RemoteErr != nil {
		ev["condition"] = string(ce.RemoteErr.Condition)
		ev["description"] = nullIfEmpty(ce.RemoteErr.Description)
	} else if err != nil {
		// not a close frame from the peer: an I/O or protocol error in the library
		ev["event"] = "error"
		ev["description"] = fmt.Sprintf("%T: %v", err, err)
	}
	s.w.write(ev)
}

func (s *shim) lookup(cmd *command) (*link, *failure) {
	if s.c == nil {
		return nil, clientErr("not connected")
	}
	l, ok := s.c.links[cmd.Link]
	if !ok {
		return nil, clientErr("unknown link %q", cmd.Link)
	}
	return l, nil
}

func senderSettleMode(name string) (*amqp.SenderSettleMode, error) {
	var m amqp.SenderSettleMode
	switch name {
	case "":
		return nil, nil
	case "unsettled":
		m = amqp.SenderSettleModeUnsettled
	case "settled":
		m = amqp.SenderSettleModeSettled
	case "mixed":
		m = amqp.SenderSettleModeMixed
	default:
		return nil, fmt.Errorf("unknown snd_settle_mode %q", name)
	}
	return &m, nil
}

func receiverSettleMode(name string) (*amqp.ReceiverSettleMode, error) {
	var m amqp.ReceiverSettleMode
	switch name {
	case "":
		return nil, nil
	case "first":
		m = amqp.ReceiverSettleModeFirst
	case "second":
		m = amqp.ReceiverSettleModeSecond
	default:
		return nil, fmt.Errorf("unknown rcv_settle_mode %q", name)
	}
	return &m, nil
}

func (s *shim) attach(cmd *command) (obj, *failure) {
	if s.c == nil {
		return nil, clientErr("not connected")
	}
	if _, ok := s.c.links[cmd.Link]; ok {
		return nil, clientErr("link %q already attached", cmd.Link)
	}
	ssm, err := senderSettleMode(cmd.SndSettleMode)
	if err != nil {
		return nil, clientErr("%v", err)
	}
	rsm, err := receiverSettleMode(cmd.RcvSettleMode)
	if err != nil {
		return nil, clientErr("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	if s.c.session == nil {
		// one session a connection, begun with the first link
		sess, err := s.c.conn.NewSession(ctx, nil)
		if err != nil {
			return nil, classify(ctx, err, "session")
		}
		s.c.session = sess
	}
	l := &link{ssm: cmd.SndSettleMode, rsm: cmd.RcvSettleMode}
	switch cmd.Role {
	case "sender":
		l.sender, err = s.c.session.NewSender(ctx, cmd.Address, &amqp.SenderOptions{
			SettlementMode:              ssm,
			RequestedReceiverSettleMode: rsm,
		})
	case "receiver":
		opts := &amqp.ReceiverOptions{
			RequestedSenderSettleMode: ssm,
			SettlementMode:            rsm,
		}
		if cmd.Drains {
			// go-amqp drains only a link whose credit the application manages: receive then grants it
			opts.Credit = -1
			l.manual = true
		}
		l.receiver, err = s.c.session.NewReceiver(ctx, cmd.Address, opts)
	default:
		return nil, clientErr("unknown role %q", cmd.Role)
	}
	if err != nil {
		var se *amqp.SessionError
		if errors.As(err, &se) {
			// the session has ended: the next attach begins a new one
			s.c.session = nil
		}
		// a refused attach comes back as the detach's bare *amqp.Error
		return nil, classify(ctx, err, "link")
	}
	s.c.links[cmd.Link] = l
	// go-amqp does not expose the modes of the peer's attach (it fails the
	// attach itself when a mode it was asked for explicitly is not echoed).
	return obj{"remote_snd_settle_mode": nil, "remote_rcv_settle_mode": nil}, nil
}

func stateJSON(st amqp.DeliveryState) any {
	switch st := st.(type) {
	case nil:
		return nil
	case *amqp.StateAccepted:
		return obj{"type": "accepted"}
	case *amqp.StateRejected:
		r := obj{"type": "rejected", "condition": nil, "description": nil}
		if st.Error != nil {
			r["condition"] = string(st.Error.Condition)
			r["description"] = nullIfEmpty(st.Error.Description)
		}
		return r
	case *amqp.StateReleased:
		return obj{"type": "released"}
	case *amqp.StateModified:
		var ann any
		if st.MessageAnnotations != nil {
			m := obj{}
			for k, v := range st.MessageAnnotations {
				m[fmt.Sprint(k)] = jsonValue(v)
			}
			ann = m
		}
		return obj{"type": "modified", "delivery_failed": st.DeliveryFailed,
			"undeliverable_here": st.UndeliverableHere, "message_annotations": ann}
	case *amqp.StateReceived:
		return obj{"type": "received", "section_number": st.SectionNumber, "section_offset": st.SectionOffset}
	default:
		return obj{"type": fmt.Sprintf("%T", st)}
	}
}

// stateName names a delivery state's type as the amqp package exports it.
func stateName(st amqp.DeliveryState) string {
	switch st.(type) {
	case nil:
		return "nil"
	case *amqp.StateAccepted:
		return "*amqp.StateAccepted"
	case *amqp.StateRejected:
		return "*amqp.StateRejected"
	case *amqp.StateReleased:
		return "*amqp.StateReleased"
	case *amqp.StateModified:
		return "*amqp.StateModified"
	case *amqp.StateReceived:
		return "*amqp.StateReceived"
	}
	return fmt.Sprintf("%T", st)
}

// jsonValue makes an AMQP value the library decoded printable as JSON.
func jsonValue(v any) any {
	switch v := v.(type) {
	case nil, bool, string, int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, float32, float64:
		return v
	case amqp.Symbol:
		return string(v)
	case []byte:
		return hex.EncodeToString(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case map[any]any:
		out := obj{}
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	default:
		return fmt.Sprint(v)
	}
}

// amqpValue turns a JSON value of a command into the Go value the library encodes.
func amqpValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, nil
		}
		return v.Float64()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			x, err := amqpValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			x, err := amqpValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported JSON value %T", v)
}

func (s *shim) send(cmd *command) (obj, *failure) {
	l, f := s.lookup(cmd)
	if f != nil {
		return nil, f
	}
	if l.sender == nil {
		return nil, clientErr("link %q is not a sender", cmd.Link)
	}
	for i, m := range cmd.Messages {
		if m.Body == nil {
			return nil, clientErr("message %d has no body", i)
		}
		if m.Settled && l.ssm == "unsettled" {
			return nil, unsupported("go-amqp cannot send pre-settled on a link attached with snd-settle-mode unsettled (Sender.Send: \"can't send message as settled when sender settlement mode is unsettled\")")
		}
		if !m.Settled && l.ssm == "settled" {
			return nil, unsupported("go-amqp sends every transfer settled on a link attached with snd-settle-mode settled (Sender.Send ignores SendOptions.Settled=false; SendWithReceipt refuses)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()

	reports := make([]obj, len(cmd.Messages))
	receipts := make([]*amqp.SendReceipt, len(cmd.Messages))
	for i, m := range cmd.Messages {
		msg := &amqp.Message{Value: *m.Body} // an amqp-value section holding a string
		if m.Settled {
			if err := l.sender.Send(ctx, msg, &amqp.SendOptions{Settled: true}); err != nil {
				return nil, classify(ctx, err, "").with("deliveries", done(reports)).
					with("failed_index", i)
			}
			// Send with Settled:true reports neither the tag nor any settlement
			reports[i] = obj{"index": i, "tag": nil, "remote_state": nil, "remote_settled": nil,
				"locally_settled": nil, "api": "Sender.Send(SendOptions{Settled: true}) returned nil"}
			continue
		}
		r, err := l.sender.SendWithReceipt(ctx, msg, nil)
		if err != nil {
			return nil, classify(ctx, err, "").with("deliveries", done(reports)).with("failed_index", i)
		}
		receipts[i] = &r
	}
	for i, r := range receipts {
		if r == nil {
			continue
		}
		tag := hex.EncodeToString(r.DeliveryTag())
		st, err := r.Wait(ctx)
		switch {
		case err == nil:
			// Wait returns once the delivery is settled (by the peer, or by the
			// library answering the peer's unsettled disposition); it does not
			// say which, so remote_settled stays null.
			reports[i] = obj{"index": i, "tag": tag, "remote_state": stateJSON(st), "remote_settled": nil,
				"locally_settled": true, "api": "SendReceipt.Wait() returned " + stateName(st)}
		case ctx.Err() != nil:
			reports[i] = obj{"index": i, "tag": tag, "remote_state": nil, "remote_settled": nil,
				"locally_settled": nil, "api": fmt.Sprintf("SendReceipt.Wait() returned %v", err)}
			go s.waitLater(s.c, cmd.Link, i, r)
		default:
			return nil, classify(ctx, err, "").with("deliveries", done(reports)).with("failed_index", i)
		}
	}
	return obj{"deliveries": reports}, nil
}

// done is the reports filled in so far.
func done(reports []obj) []obj {
	out := []obj{}
	for _, r := range reports {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// waitLater keeps waiting on a receipt the send command gave up on and reports
// what the library says later as a delivery-update event.
func (s *shim) waitLater(c *connection, linkName string, index int, r *amqp.SendReceipt) {
	st, err := r.Wait(c.ctx)
	if err != nil || c.closing.Load() {
		if err != nil && c.ctx.Err() == nil {
			log.Printf("link %s delivery %d: SendReceipt.Wait() later: %v", linkName, index, err)
		}
		return
	}
	s.w.write(obj{"event": "delivery-update", "link": linkName, "index": index, "remote_state": stateJSON(st),
		"remote_settled": nil, "locally_settled": true, "api": "SendReceipt.Wait() returned " + stateName(st)})
}

func messageBody(m *amqp.Message) any {
	switch v := m.Value.(type) {
	case string:
		return v
	case amqp.Symbol:
		return string(v)
	case nil:
	default:
		return fmt.Sprint(v)
	}
	if len(m.Data) > 0 {
		return string(bytes.Join(m.Data, nil))
	}
	if len(m.Sequence) > 0 {
		return fmt.Sprint(m.Sequence)
	}
	return nil
}

// disposition checks an outcome and returns the call that gives it.
func disposition(o *outcome) (func(ctx context.Context, r *amqp.Receiver, m *amqp.Message) error, string, *failure) {
	switch o.Type {
	case "accepted":
		return func(ctx context.Context, r *amqp.Receiver, m *amqp.Message) error {
			return r.AcceptMessage(ctx, m)
		}, "Receiver.AcceptMessage()", nil
	case "rejected":
		var e *amqp.Error
		if o.Condition != nil {
			e = &amqp.Error{Condition: amqp.ErrCond(*o.Condition)}
			if o.Description != nil {
				if *o.Description == "" {
					return nil, "", unsupported("go-amqp omits an empty description (amqp.Error.Description \"\" is not encoded)")
				}
				e.Description = *o.Description
			}
		} else if o.Description != nil {
			return nil, "", unsupported("go-amqp cannot reject with a description but no condition (RejectMessage takes an *amqp.Error whose condition is always encoded)")
		}
		return func(ctx context.Context, r *amqp.Receiver, m *amqp.Message) error {
			return r.RejectMessage(ctx, m, e)
		}, "Receiver.RejectMessage()", nil
	case "released":
		return func(ctx context.Context, r *amqp.Receiver, m *amqp.Message) error {
			return r.ReleaseMessage(ctx, m)
		}, "Receiver.ReleaseMessage()", nil
	case "modified":
		opts := &amqp.ModifyMessageOptions{DeliveryFailed: o.DeliveryFailed, UndeliverableHere: o.UndeliverableHere}
		if o.MessageAnnotations != nil {
			opts.Annotations = amqp.Annotations{}
			for k, v := range o.MessageAnnotations {
				x, err := amqpValue(v)
				if err != nil {
					return nil, "", unsupported(fmt.Sprintf("message annotation %q: %v", k, err))
				}
				opts.Annotations[k] = x // string keys are encoded as symbols
			}
		}
		return func(ctx context.Context, r *amqp.Receiver, m *amqp.Message) error {
			return r.ModifyMessage(ctx, m, opts)
		}, "Receiver.ModifyMessage()", nil
	}
	return nil, "", unsupported(fmt.Sprintf("go-amqp has no call for outcome type %q", o.Type))
}

func outcomeJSON(o *outcome) obj {
	r := obj{"type": o.Type}
	switch o.Type {
	case "rejected":
		r["condition"], r["description"] = o.Condition, o.Description
	case "modified":
		r["delivery_failed"], r["undeliverable_here"] = o.DeliveryFailed, o.UndeliverableHere
		if o.MessageAnnotations != nil {
			r["message_annotations"] = o.MessageAnnotations
		} else {
			r["message_annotations"] = nil
		}
	}
	return r
}

func (s *shim) receive(cmd *command) (obj, *failure) {
	l, f := s.lookup(cmd)
	if f != nil {
		return nil, f
	}
	if l.receiver == nil {
		return nil, clientErr("link %q is not a receiver", cmd.Link)
	}
	var (
		dispose func(context.Context, *amqp.Receiver, *amqp.Message) error
		call    string
	)
	if cmd.Outcome != nil {
		if dispose, call, f = disposition(cmd.Outcome); f != nil {
			return nil, f
		}
		settle := cmd.Settle == nil || *cmd.Settle
		// go-amqp settles a disposition exactly when the link's rcv-settle-mode is first
		if settle && l.rsm == "second" {
			return nil, unsupported("go-amqp cannot settle with the outcome under rcv-settle-mode second: its disposition calls send settled=false and wait for the sender to settle")
		}
		if !settle && l.rsm == "first" {
			return nil, unsupported("go-amqp always settles with the outcome under rcv-settle-mode first: its disposition calls have no settle flag")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	if l.manual && cmd.Count > 0 && uint32(cmd.Count) > l.granted {
		// manual credits: grant what the messages still to come need, as the default credit would
		need := uint32(cmd.Count) - l.granted
		if err := l.receiver.IssueCredit(need); err != nil {
			return nil, classify(ctx, err, "").with("deliveries", []obj{})
		}
		l.granted += need
	}
	reports := []obj{}
	for i := 0; i < cmd.Count; i++ {
		msg, err := l.receiver.Receive(ctx, nil)
		if err == nil && l.granted > 0 {
			l.granted--
		}
		if err != nil {
			f := classify(ctx, err, "")
			if f.err["kind"] == "timeout" {
				f.err["description"] = fmt.Sprintf("%d of %d messages within %d ms", i, cmd.Count, cmd.timeout().Milliseconds())
			}
			return nil, f.with("deliveries", reports)
		}
		rep := obj{"index": i, "body": messageBody(msg), "tag": hex.EncodeToString(msg.DeliveryTag),
			// go-amqp keeps the transfer's settled flag unexported
			"settled_on_arrival": nil, "delivery_count": nil, "first_acquirer": nil,
			"disposed": nil, "locally_settled": nil, "remote_settled": nil}
		if msg.Header != nil {
			rep["delivery_count"] = msg.Header.DeliveryCount
			rep["first_acquirer"] = msg.Header.FirstAcquirer
		}
		if dispose != nil {
			if err := dispose(ctx, l.receiver, msg); err != nil {
				rep["api"] = fmt.Sprintf("%s returned %v", call, err)
				reports = append(reports, rep)
				return nil, classify(ctx, err, "delivery").with("deliveries", reports)
			}
			rep["disposed"] = outcomeJSON(cmd.Outcome)
			// the call returns nil once the message is settled locally (rcv-settle-mode
			// first: when the disposition is written; second: when the sender's
			// disposition came back)
			rep["locally_settled"] = true
			rep["api"] = call + " returned nil"
		}
		reports = append(reports, rep)
	}
	return obj{"deliveries": reports}, nil
}

// drain grants the credit and drains it: Receiver.IssueCredit, then Receiver.DrainCredit, which returns nil once
// the broker's flow answering the drain came (go-amqp's drain flow states link-credit 0). It takes no message: one
// that arrives meanwhile stays in the receiver's prefetch queue.
func (s *shim) drain(cmd *command) (obj, *failure) {
	l, f := s.lookup(cmd)
	if f != nil {
		return nil, f
	}
	if l.receiver == nil {
		return nil, clientErr("link %q is not a receiver", cmd.Link)
	}
	if cmd.Credit == nil {
		return nil, clientErr("drain needs credit")
	}
	if *cmd.Credit < 1 || *cmd.Credit > math.MaxUint32 {
		return nil, clientErr("credit must be from 1 to %d, got %d", uint32(math.MaxUint32), *cmd.Credit)
	}
	if !l.manual {
		return nil, unsupported("go-amqp drains only a link with manual credits (ReceiverOptions.Credit -1): " +
			"Receiver.DrainCredit refuses one with the library's default credit; attach it with drains")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	if err := l.receiver.IssueCredit(uint32(*cmd.Credit)); err != nil {
		return nil, classify(ctx, err, "")
	}
	l.granted += uint32(*cmd.Credit)
	if err := l.receiver.DrainCredit(ctx, nil); err != nil {
		f := classify(ctx, err, "")
		if f.err["kind"] == "timeout" {
			f.err["description"] = fmt.Sprintf("Receiver.DrainCredit() had not returned within %d ms: %v",
				cmd.timeout().Milliseconds(), err)
		}
		return nil, f
	}
	// after a drain the link has no credit (what arrived meanwhile waits in the prefetch queue)
	l.granted = 0
	// go-amqp does not expose the link's credit
	return obj{"api": "Receiver.DrainCredit() returned", "credit": nil}, nil
}

func (s *shim) detach(cmd *command) (obj, *failure) {
	l, f := s.lookup(cmd)
	if f != nil {
		return nil, f
	}
	if !cmd.Close {
		return nil, unsupported("go-amqp can only close a link (Sender.Close/Receiver.Close send detach with closed=true); it has no detach without closing")
	}
	delete(s.c.links, cmd.Link)
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	var err error
	if l.sender != nil {
		err = l.sender.Close(ctx)
	} else {
		err = l.receiver.Close(ctx)
	}
	if err != nil {
		return nil, classify(ctx, err, "link")
	}
	return obj{}, nil
}

func (s *shim) close(cmd *command) (obj, *failure) {
	if s.c == nil {
		return nil, clientErr("not connected")
	}
	c := s.c
	s.c = nil // link names from before are forgotten, whatever Close says
	if c.session != nil {
		// as an application closes what it began: Session.Close tells of an end the broker sent with an error
		// (a *SessionError with RemoteErr), which nothing else in the API reports once no link call is waiting;
		// half the command's time, so that a broker that never answers the end leaves the connection's close time
		ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout()/2)
		err := c.session.Close(ctx)
		cancel()
		var se *amqp.SessionError
		if errors.As(err, &se) && se.RemoteErr != nil {
			s.w.write(obj{"event": "error", "scope": "session", "condition": string(se.RemoteErr.Condition),
				"description": nullIfEmpty(se.RemoteErr.Description), "api": "Session.Close() returned *amqp.SessionError"})
		} else if err != nil {
			log.Printf("Session.Close(): %v", err)
		}
	}
	c.closing.Store(true)
	c.cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.conn.Close() }()
	select {
	case err := <-errc:
		if err != nil {
			return nil, classify(nil, err, "connection")
		}
		return obj{}, nil
	case <-time.After(cmd.timeout()):
		return nil, fail("timeout", fmt.Sprintf("Conn.Close() did not return within %d ms", cmd.timeout().Milliseconds()))
	}
}
