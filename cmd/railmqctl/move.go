package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// move_messages is the management UI's "Move messages" (RabbitMQ's queue
// page, with rabbitmq_shovel_management) as a command. RabbitMQ has no
// rabbitmqctl command for it. It defines the dynamic shovel the UI's form
// defines, the same value (moveValue), and then, unless --no-wait, follows
// it until its parameter is gone (the shovel deletes it once it has moved
// the queue's length, src-delete-after "queue-length"), printing what has
// moved and what remains. /api/shovels (RabbitMQ 3.10.8's JSON) carries
// no counts, so they come from the source queue's depth: remaining is its
// messages (ready and unacknowledged), moved what left it since the start
// (acknowledged at the source, so confirmed by the destination: ack-mode
// on-confirm).

type moveOpts struct {
	src, dst, destURI, name string
	noWait                  bool
	stream                  bool // the source is a stream, which keeps what is read from it
	interval, timeout       time.Duration
}

func newMoveCmd(c *client) *cobra.Command {
	var o moveOpts
	cmd := &cobra.Command{Use: "move_messages SOURCE_QUEUE DESTINATION_QUEUE",
		Short: "move a queue's messages to another queue (here or at --dest-uri) with a shovel, as the management UI's \"Move messages\"; prints progress until done",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, a []string) error {
			o.src, o.dst = a[0], a[1]
			return c.moveMessages(o)
		}}
	cmd.Flags().StringVar(&o.destURI, "dest-uri", "", "the destination broker's URI, several separated by spaces (default amqp:///VHOST: this broker, --vhost)")
	cmd.Flags().StringVar(&o.name, "name", "", "the shovel's name (default \"Move from SOURCE_QUEUE\", the UI's)")
	cmd.Flags().BoolVar(&o.noWait, "no-wait", false, "define the shovel and return; it carries on and deletes itself when done")
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "how often to print progress")
	// The global --timeout (seconds) lands here too, move's own flag
	// shadowing it: seconds or a duration (10s, 2m).
	cmd.Flags().Var(secondsOrDuration{&o.timeout}, "timeout", "give up (deleting the shovel) when not done by then: seconds or a duration such as 2m (0: wait as long as it takes)")
	return cmd
}

// uriComponent escapes s as JavaScript's encodeURIComponent, which the
// UI's form applies to the vhost in amqp:///VHOST (esc, formatters.js).
func uriComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// moveValue is the shovel parameter's value exactly as RabbitMQ 3.10.8's
// UI sends it: the hidden fields of the "Move messages" form
// (deps/rabbitmq_management/priv/www/js/tmpl/queue.ejs) as put_parameter
// and the shovel-parameters-move-messages route
// (deps/rabbitmq_shovel_management/priv/www/js/shovel.js) cast them:
// src-prefetch-count a number, dest-add-forward-headers a boolean, the
// URIs split on spaces (one is a string, several a list) and
// src-consumer-args {} ({"x-stream-offset": "first"} from a stream).
func moveValue(vhost, src, dst, destURI string, stream bool) map[string]any {
	local := "amqp:///" + uriComponent(vhost)
	var dest any = local
	if f := strings.Fields(destURI); len(f) == 1 {
		dest = f[0]
	} else if len(f) > 1 {
		dest = f
	}
	args := map[string]any{}
	if stream {
		args["x-stream-offset"] = "first"
	}
	return map[string]any{"src-uri": local, "src-queue": src, "src-protocol": "amqp091", "src-prefetch-count": 1000,
		"src-delete-after": "queue-length", "dest-protocol": "amqp091", "dest-uri": dest, "dest-add-forward-headers": false,
		"ack-mode": "on-confirm", "dest-queue": dst, "src-consumer-args": args}
}

// queueDepth is a queue's messages (ready and unacknowledged) and type.
func (c *client) queueDepth(name string) (n int64, typ string, err error) {
	raw, err := c.do("GET", "/api/queues/"+c.vh()+"/"+url.PathEscape(name), nil)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			return 0, "", fmt.Errorf("no queue '%s' in vhost '%s': %w", name, c.vhost, err)
		}
		return 0, "", err
	}
	var q struct {
		Messages int64
		Type     string
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return 0, "", fmt.Errorf("queue '%s': %w", name, err)
	}
	return q.Messages, q.Type, nil
}

// denied says what a refused parameter call needs.
func (c *client) denied(err error) error {
	var se *statusError
	if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
		return fmt.Errorf("user '%s' may not define shovels in vhost '%s' (it takes the policymaker or administrator tag and permissions there): %w", c.user, c.vhost, err)
	}
	return err
}

func (c *client) moveMessages(o moveOpts) error {
	if o.name == "" {
		o.name = "Move from " + o.src
	}
	param := "/api/parameters/shovel/" + c.vh() + "/" + url.PathEscape(o.name)
	total, typ, err := c.queueDepth(o.src)
	if err != nil {
		return err
	}
	// A shovel of that name is a move under way: PUT would replace it
	// (and restart it with the queue's length now).
	_, err = c.do("GET", param, nil)
	var se *statusError
	switch {
	case err == nil:
		return fmt.Errorf("a shovel named '%s' exists in vhost '%s' already (a move from '%s' under way?); wait for it or give --name", o.name, c.vhost, o.src)
	case !errors.As(err, &se) || se.Code != http.StatusNotFound:
		return c.denied(err)
	}
	body := map[string]any{"component": "shovel", "vhost": c.vhost, "name": o.name,
		"value": moveValue(c.vhost, o.src, o.dst, o.destURI, typ == "stream")}
	o.stream = typ == "stream"
	if _, err := c.do("PUT", param, body); err != nil {
		return c.denied(err)
	}
	start := time.Now()
	verb := "moving"
	if o.stream {
		verb = "copying" // from the first offset; a stream keeps its messages
	}
	fmt.Fprintf(c.out, "%s %d messages from '%s' to '%s' in vhost '%s' (shovel '%s')\n", verb, total, o.src, o.dst, c.vhost, o.name)
	if o.noWait {
		return nil
	}
	return c.followMove(o, param, total, start)
}

// moveStep is one look at a move: the shovel's state (and reason), and
// whether its parameter is gone (the move is done).
type moveStep struct {
	state, reason string
	gone          bool
	remaining     int64
}

func (c *client) moveLook(o moveOpts, param string) (moveStep, error) {
	var st moveStep
	if _, err := c.do("GET", param, nil); err != nil {
		var se *statusError
		if !errors.As(err, &se) || se.Code != http.StatusNotFound {
			return st, err
		}
		st.gone = true
	}
	if !st.gone {
		raw, err := c.do("GET", "/api/shovels/"+c.vh(), nil)
		if err != nil {
			return st, err
		}
		var shovels []struct{ Name, State, Reason string }
		if err := json.Unmarshal(raw, &shovels); err != nil {
			return st, fmt.Errorf("/api/shovels: %w", err)
		}
		st.state = "starting" // defined, not started yet
		for _, s := range shovels {
			if s.Name == o.name {
				st.state, st.reason = s.State, s.Reason
			}
		}
	}
	n, _, err := c.queueDepth(o.src)
	st.remaining = n
	return st, err
}

// followMove prints progress every o.interval until the shovel's
// parameter is gone; a shovel that terminates (for another reason than
// having completed) or outlives o.timeout is deleted and the move fails.
func (c *client) followMove(o moveOpts, param string, total int64, start time.Time) error {
	last, lastAt := int64(0), start
	warned := false
	startingSince := start // when the shovel was last seen entering "starting"
	wasStarting := true
	for {
		st, err := c.moveLook(o, param)
		if err != nil {
			return fmt.Errorf("following shovel '%s': %w", o.name, err)
		}
		now := time.Now()
		if st.gone {
			c.moveDone(o, total, st.remaining, now, now.Sub(start))
			return nil
		}
		if st.state == "terminated" && strings.Contains(st.reason, "completed") {
			st.state = "completed" // railmq's shovel, until its parameter is deleted
		}
		if st.state == "starting" && !wasStarting {
			startingSince = now // a new session: its connecting time counts from here
		}
		wasStarting = st.state == "starting"
		moved := max(total-st.remaining, 0)
		if o.stream {
			// What is read from a stream stays in it: its depth says
			// nothing of the progress.
			moved, st.remaining = 0, total
			fmt.Fprintf(c.out, "%s: copying %d messages\n", st.state, total)
		} else {
			rate := float64(moved-last) / max(now.Sub(lastAt).Seconds(), 1e-3)
			last, lastAt = moved, now
			fmt.Fprintf(c.out, "%s: moved %d of %d, remaining %d, %.0f msg/s\n", st.state, moved, total, st.remaining, rate)
		}
		fail := ""
		switch {
		case st.state == "terminated":
			fail = "the shovel terminated: " + strings.Trim(st.reason, `"`)
			if strings.Contains(st.reason, "needed a restart") {
				fail += " (a broker closed its channel or connection with an error; the broker's log says which)"
			}
		case o.timeout > 0 && now.Sub(start) > o.timeout:
			fail = fmt.Sprintf("not done after %v", o.timeout)
		case st.state == "starting" && !warned && now.Sub(startingSince) > 15*time.Second:
			warned = true
			fmt.Fprintf(c.out, "the shovel is still starting after %.0fs: it cannot connect? (the broker's log says why)\n", now.Sub(startingSince).Seconds())
		}
		if fail != "" {
			if _, err := c.do("DELETE", param, nil); err != nil {
				var se *statusError
				if !errors.As(err, &se) || se.Code != http.StatusNotFound {
					return fmt.Errorf("move from '%s' to '%s' failed: %s (moved %d of %d); deleting the shovel: %w", o.src, o.dst, fail, moved, total, err)
				}
			}
			return fmt.Errorf("move from '%s' to '%s' failed: %s (moved %d of %d; the shovel is deleted, %d messages remain in '%s')", o.src, o.dst, fail, moved, total, st.remaining, o.src)
		}
		time.Sleep(o.interval)
	}
}

// moveDone prints how the move ended, its shovel gone at time at, took
// after it began.
func (c *client) moveDone(o moveOpts, total, remaining int64, at time.Time, took time.Duration) {
	if o.stream {
		// The shovel has copied the stream's length as it read it at
		// its start.
		fmt.Fprintf(c.out, "copied %d messages from stream '%s' to '%s' in %.1fs (%.0f msg/s); the stream keeps them\n", total, o.src, o.dst, took.Seconds(), float64(total)/took.Seconds())
		return
	}
	if remaining > 0 {
		if n, ok := c.settledDepth(o.src, at); ok {
			remaining = n
		}
	}
	moved := max(total-remaining, 0)
	fmt.Fprintf(c.out, "done: moved %d of %d, remaining %d\n", moved, total, remaining)
	fmt.Fprintf(c.out, "moved %d messages from '%s' to '%s' in %.1fs (%.0f msg/s)\n", moved, o.src, o.dst, took.Seconds(), float64(moved)/took.Seconds())
	if remaining > 0 {
		fmt.Fprintf(c.out, "%d messages are left in '%s' (published after the move began, or the shovel was deleted)\n", remaining, o.src)
	}
}

// settledDepth reads a queue's depth again once the broker's figures are
// newer than t. RabbitMQ's management API answers a queue's messages as
// its statistics had them at the last collection (every 5 s,
// collect_statistics_interval), so right after a move they may still
// count messages that have gone. Its samples (lengths_age) are stamped
// with the end of their 5 s bucket, and the answer's top-level messages
// and its newest sample are not always from the same collection (seen on
// RabbitMQ 3.10.8): it waits (20 s at most) for a sample stamped more
// than 10 s after t, so collected after t, and answers that sample.
// railmq's figures are live and this is not called unless something is
// left; with no samples it answers false at once.
func (c *client) settledDepth(name string, t time.Time) (int64, bool) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		raw, err := c.do("GET", "/api/queues/"+c.vh()+"/"+url.PathEscape(name)+"?lengths_age=60&lengths_incr=5", nil)
		if err != nil {
			return 0, false
		}
		var q struct {
			MessagesDetails struct {
				Samples []struct {
					Sample    int64
					Timestamp int64
				}
			} `json:"messages_details"`
		}
		if json.Unmarshal(raw, &q) != nil || len(q.MessagesDetails.Samples) == 0 {
			return 0, false
		}
		newest := q.MessagesDetails.Samples[0]
		for _, s := range q.MessagesDetails.Samples {
			if s.Timestamp > newest.Timestamp {
				newest = s
			}
		}
		if time.UnixMilli(newest.Timestamp).After(t.Add(10 * time.Second)) {
			return newest.Sample, true
		}
		time.Sleep(time.Second)
	}
	return 0, false
}
