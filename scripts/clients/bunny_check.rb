#!/usr/bin/ruby
# Exercise an AMQP 0-9-1 broker with Ruby bunny (2.19) the way applications do.
#
# Usage: /usr/bin/ruby scripts/clients/bunny_check.rb amqp://guest:guest@127.0.0.1:5690/
#
# Prints one line per check, `ok NAME` or `FAIL NAME: detail`, and exits 1 if
# any check failed. Every expectation here was taken from RabbitMQ 3.10.8.
# Lines starting with `info` are observations, not checks.

require "bunny"
require "logger"
require "stringio"
require "securerandom"
require "timeout"
require "uri"

URL = ARGV[0] || "amqp://guest:guest@127.0.0.1:5672/"
# Bunny reads the path of amqp://host/ strictly as the AMQP URI spec says:
# "/" is the vhost "" (the default vhost "/" is spelled %2F). Take "/" or no
# path to mean the default vhost, as pika and most clients do.
VHOST_OPT = %w[/ ].include?(URI(URL).path) || URI(URL).path.empty? ? { vhost: "/" } : {}
RUN = SecureRandom.hex(4)
FAILS = []
CHECKS = []

class CheckFailed < StandardError; end

# Everything bunny logs at WARN or above goes here; checks that expect a clean
# run report it.
LOG_IO = StringIO.new
LOGGER = Logger.new(LOG_IO)
LOGGER.level = Logger::WARN
# A reader-loop thread killed by an exception is counted by the close checks
# (thread_outcome); keep Ruby's own report of it off stderr.
Thread.report_on_exception = false

# Connection-level errors bunny raises asynchronously (reader loop thread).
class ErrorSink
  attr_reader :errors
  def initialize; @errors = Queue.new; end

  # Thread#raise never returns to the reader loop; stop it the same way.
  def raise(e)
    @errors << e
    Kernel.raise Bunny::ShutdownSignal if Thread.current != Thread.main
  end
end

# Count heartbeat frames each transport reads.
module CountHeartbeats
  def heartbeats_received; @heartbeats_received ||= 0; end
  def read_next_frame(*args)
    f = super
    @heartbeats_received = heartbeats_received + 1 if f.is_a?(AMQ::Protocol::HeartbeatFrame)
    f
  end
end
Bunny::Transport.prepend(CountHeartbeats)

# Register the block as the check NAME. A block that takes |c, ch| runs in a
# session (a connection and a channel on it, closed after the check; see
# session). Whatever the check declared with declare_queue /
# declare_exchange is deleted after it, also when it failed.
def check(name, &blk)
  CHECKS << [name, blk]
end

def run_checks
  CHECKS.each do |name, blk|
    LOG_IO.truncate(0); LOG_IO.rewind
    begin
      begin
        Timeout.timeout(40) { blk.arity.zero? ? blk.call : session { |c, ch| blk.call(c, ch) } }
      rescue Exception # rubocop:disable Lint/RescueException
        delete_declared(quiet: true)
        raise
      end
      delete_declared
      puts "ok #{name}"
    rescue CheckFailed => e
      FAILS << name
      puts "FAIL #{name}: #{e.message}"
    rescue Exception => e # rubocop:disable Lint/RescueException
      FAILS << name
      lines = (e.backtrace || []).select { |l| l.include?("bunny_check.rb") }
      # the check's own line rather than a helper's
      where = lines.find { |l| l.include?("in <main>") } || lines.first
      puts "FAIL #{name}: unexpected #{e.class}: #{e.message} (#{where})"
    end
    $stdout.flush
  end
end

def eq(got, want, what = "value")
  raise CheckFailed, "#{what}: got #{got.inspect}, want #{want.inspect}" unless got == want
end

def assert(cond, msg)
  raise CheckFailed, msg unless cond
end

def connect(opts = {})
  c = Bunny.new(URL, { logger: LOGGER }.merge(VHOST_OPT).merge(opts))
  c.start
  c
end

# `session { |c, ch| ... }`: a connection (connect's options) and a channel on
# it, for one check. The connection is closed after the block unless it is
# closed already (by the check or by the broker). Returns the block's value.
def session(opts = {})
  c = connect(opts)
  begin
    result = yield c, c.create_channel
  rescue Exception # rubocop:disable Lint/RescueException
    begin
      c.close if c.open?
    rescue Exception # rubocop:disable Lint/RescueException
      nil # the check's own error is the one to report
    end
    raise
  end
  c.close if c.open?
  result
end

def name(s)
  "bunny.#{RUN}.#{s}"
end

# [kind, name] of what the running check declared through the two helpers
# below; run_checks deletes them after the check, on a connection of its own.
DECLARED = []

# Declare the queue name(suffix) (Channel#queue's options), to be deleted
# after the check.
def declare_queue(ch, suffix, opts = {})
  DECLARED << [:queue, name(suffix)]
  ch.queue(name(suffix), opts)
end

# Declare the exchange name(suffix) of type (:direct, :fanout, :topic,
# :headers), to be deleted after the check.
def declare_exchange(ch, type, suffix, opts = {})
  DECLARED << [:exchange, name(suffix)]
  ch.public_send(type, name(suffix), opts)
end

# Delete what the check declared (deleting what is gone already is fine);
# quiet: the check failed already, so errors here are not reported.
def delete_declared(quiet: false)
  todo = DECLARED.dup
  DECLARED.clear
  return if todo.empty?

  Timeout.timeout(20) do
    session do |_c, ch|
      todo.each { |kind, n| kind == :queue ? ch.queue_delete(n) : ch.exchange_delete(n) }
    end
  end
rescue Exception # rubocop:disable Lint/RescueException
  raise unless quiet
end

# A server-named exclusive queue (it goes with its connection).
def temp_queue(ch, arguments = nil)
  opts = { exclusive: true }
  opts[:arguments] = arguments if arguments
  ch.queue("", opts)
end

# Publish each body to queue q through the default exchange.
def publish(ch, q, *bodies, **props)
  bodies.each { |b| ch.default_exchange.publish(b, { routing_key: q.name }.merge(props)) }
end

def not_found(kind, n)
  "NOT_FOUND - no #{kind} '#{n}' in vhost '/'"
end

def warnings
  LOG_IO.string.lines.map(&:strip).reject(&:empty?)
end

# How the session's reader-loop thread ended: false when it returned, nil
# when an exception killed it (Ruby then prints "terminated with exception"
# on stderr). Bunny kills it with ShutdownSignal on close; if the thread is
# already handling an EOF from the server at that moment, the signal lands
# inside its rescue clause and kills it.
def reader_thread(c)
  rl = c.instance_variable_get(:@reader_loop)
  rl && rl.instance_variable_get(:@thread)
end

def thread_outcome(t)
  return :no_thread unless t
  begin
    t.join(2)
  rescue Exception # rubocop:disable Lint/RescueException
    nil
  end
  t.status
end

def no_warnings(what)
  w = warnings
  raise CheckFailed, "#{what}: bunny logged #{w.first(3).inspect}" unless w.empty?
end

def expect_channel_close(klass, code, text)
  yield
rescue Bunny::ChannelLevelException => e
  eq([e.class, e.channel_close.reply_code, e.channel_close.reply_text], [klass, code, text], "channel.close")
else
  raise CheckFailed, "no channel.close, want #{code} #{text}"
end

# For asynchronous methods (publish, ack): the broker's channel.close shows
# up as the channel's last error.
def expect_async_close(ch, code, text)
  yield
  wait_until { !ch.open? }
  err = ch.instance_variable_get(:@last_channel_error)
  assert(!ch.open?, "channel still open, want #{code} #{text}")
  assert(err, "channel closed without a recorded error")
  eq([err.channel_close.reply_code, err.channel_close.reply_text], [code, text], "channel.close")
end

def wait_until(timeout = 2)
  deadline = Time.now + timeout
  until yield
    return false if Time.now > deadline
    sleep 0.02
  end
  true
end

def pop_wait(q, opts = { manual_ack: false }, timeout = 3)
  deadline = Time.now + timeout
  loop do
    di, props, body = q.pop(opts)
    return [di, props, body] if di || Time.now > deadline
    sleep 0.05
  end
end

# A handle on an existing queue, without declaring it again.
def existing(ch, qname)
  Bunny::Queue.new(ch, qname, no_declare: true)
end

def drain(ch, qname)
  out = []
  loop do
    di, _p, body = existing(ch, qname).pop
    return out unless di
    out << body
  end
end

# The basic.returns of exchange x, as [return-info, properties, body].
def collect_returns(x)
  returns = Queue.new
  x.on_return { |ri, props, body| returns << [ri, props, body] }
  returns
end

# ---------------------------------------------------------------- connections

check("connect_close_clean") do
  c = connect
  ch = c.create_channel
  temp_queue(ch)
  ch.close
  t = reader_thread(c)
  c.close
  sleep 0.3 # the reader loop would log a network failure here
  eq(c.status, :closed, "status")
  eq(thread_outcome(t), false, "reader thread ended normally")
  no_warnings("clean close")
end

check("close_200_connections") do
  errs = []
  conns = []
  threads = []
  200.times do |i|
    begin
      c = connect
      c.create_channel
      threads << reader_thread(c)
      c.close
      conns << c
    rescue Exception => e # rubocop:disable Lint/RescueException
      errs << "#{i}: #{e.class} #{e.message}"
    end
  end
  sleep 1
  assert(errs.empty?, "#{errs.size} errors, first: #{errs.first(3).inspect}")
  statuses = conns.map(&:status).tally
  eq(statuses, { closed: 200 }, "statuses after close")
  killed = threads.count { |t| thread_outcome(t).nil? }
  eq(killed, 0, "reader threads killed by an exception (stderr 'terminated with exception')")
  no_warnings("200 clean closes")
end

check("close_with_open_channels") do
  c = connect
  chans = Array.new(5) { c.create_channel }
  q = temp_queue(chans[0])
  chans[1].basic_consume(q.name, "", true, false, nil) { |*_a| }
  c.close
  sleep 0.2
  assert(chans.none?(&:open?), "channels left open")
  no_warnings("close with channels")
end

check("server_properties") do
  c = connect
  want = {
    "publisher_confirms" => true, "exchange_exchange_bindings" => true, "basic.nack" => true,
    "consumer_cancel_notify" => true, "connection.blocked" => true, "consumer_priorities" => true,
    "authentication_failure_close" => true, "per_consumer_qos" => true, "direct_reply_to" => true
  }
  eq(c.server_capabilities, want, "capabilities")
  %w[product version platform copyright information].each do |k|
    assert(c.server_properties.key?(k), "server property #{k} missing")
  end
  c.close
end

check("tune_negotiated") do
  c = connect
  # bunny offers channel_max 2047 (65535 before 2.19's cap) and frame_max 131072
  eq([c.channel_max, c.frame_max, c.heartbeat], [2047, 131_072, 60], "channel_max, frame_max, heartbeat")
  c.close
end

check("auth_failure") do
  begin
    Bunny.new(URL.sub("guest:guest@", "guest:wrong@"), { logger: LOGGER, automatically_recover: false }.merge(VHOST_OPT)).start
  rescue Bunny::AuthenticationFailureError => e
    eq([e.username, e.vhost], ["guest", "/"], "error fields")
  rescue Exception => e # rubocop:disable Lint/RescueException
    raise CheckFailed, "got #{e.class}: #{e.message}"
  else
    raise CheckFailed, "connection with a wrong password opened"
  end
end

check("vhost_missing") do
  begin
    Bunny.new(URL, logger: LOGGER, automatically_recover: false, vhost: "nope").start
  rescue Exception => e # rubocop:disable Lint/RescueException
    msg = "#{e.class}: #{e.message}"
    # bunny raises its own error for a refused connection.open
    assert(e.is_a?(Bunny::NotAllowedError) || msg.include?("NOT_ALLOWED - vhost nope not found"), msg)
    if e.respond_to?(:connection_close) && e.connection_close
      eq([e.connection_close.reply_code, e.connection_close.reply_text], [530, "NOT_ALLOWED - vhost nope not found"],
         "connection.close")
    end
  else
    raise CheckFailed, "connection to a missing vhost opened"
  end
end

HB = [nil]

check("heartbeat_negotiated_and_idle") do
  c = connect(heartbeat: 2)
  eq(c.heartbeat, 2, "negotiated heartbeat")
  sleep 7
  assert(c.open?, "connection dropped while idle (status #{c.status})")
  temp_queue(c.create_channel)
  HB[0] = c.transport.heartbeats_received
  c.close
  no_warnings("heartbeat idle")
  puts "info heartbeat frames received in 7 s at heartbeat=2: #{HB[0]}"
end

check("heartbeat_server_sends_at_half_interval") do
  assert(HB[0] && HB[0] >= 5, "server sent #{HB[0].inspect} heartbeat frames in 7 s at heartbeat=2 (RabbitMQ: 6-7)")
end

check("heartbeat_disabled") do
  c = connect(heartbeat: 0)
  eq(c.heartbeat, 0, "heartbeat=0 negotiated")
  c.close
end

check("connection_blocked_capability") do |c, ch|
  eq(c.server_capabilities["connection.blocked"], true, "server capability")
  eq(Bunny::Session::DEFAULT_CLIENT_PROPERTIES[:capabilities][:"connection.blocked"], true, "client capability")
  events = []
  c.on_blocked { |_m| events << :blocked }
  c.on_unblocked { events << :unblocked }
  publish(ch, temp_queue(ch), "x")
  sleep 0.3
  eq(events, [], "blocked events without an alarm")
  eq(c.blocked?, false, "blocked?")
end

# ---------------------------------------------------------- exchanges, queues

check("exchange_declare_types") do |_c, ch|
  %w[direct fanout topic headers].each do |t|
    [false, true].each do |durable|
      n = name("ex.#{t}.#{durable}")
      ch.exchange_declare(n, t, durable: durable)
      ch.exchange_declare(n, t, durable: durable)
      ch.exchange_declare(n, t, passive: true)
      ch.exchange_delete(n)
    end
  end
  x = ch.fanout(name("ex.ad"), auto_delete: true)
  x.delete
  ch.exchange_declare("amq.direct", "direct", passive: true)
  ch.topic("amq.topic", durable: true)
end

check("exchange_passive_missing_404") do |c, ch|
  n = name("nope")
  expect_channel_close(Bunny::NotFound, 404, not_found("exchange", n)) do
    ch.exchange_declare(n, "direct", passive: true)
  end
  assert(c.open?, "connection closed")
  assert(!ch.open?, "channel still open")
  temp_queue(c.create_channel)
end

check("exchange_reserved_name_403") do |c, ch|
  [[->(chan) { chan.direct("amq.bunny#{RUN}") },
    "exchange name 'amq.bunny#{RUN}' contains reserved prefix 'amq.*'"],
   [->(chan) { chan.exchange_delete("amq.fanout") },
    "deletion of system exchange 'amq.fanout' in vhost '/' not allowed"]].each do |op, text|
    expect_channel_close(Bunny::AccessRefused, 403, "ACCESS_REFUSED - #{text}") { op.call(ch) }
    ch = c.create_channel
  end
end

check("exchange_delete_if_unused") do |c, ch|
  x = declare_exchange(ch, :direct, "ex.inuse")
  temp_queue(ch).bind(x, routing_key: "k")
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       "PRECONDITION_FAILED - exchange '#{x.name}' in vhost '/' in use") do
    ch.exchange_delete(x.name, if_unused: true)
  end
  ch = c.create_channel
  ch.exchange_delete(x.name)
  ch.exchange_delete(name("ex.never"))
end

check("queue_declare_kinds") do |c, ch|
  qd = name("q.durable")
  ok = ch.queue_declare(qd, durable: true)
  eq([ok.queue, ok.message_count, ok.consumer_count], [qd, 0, 0], "declare-ok")
  ch.queue_declare(qd, durable: true)
  eq(ch.queue_declare(qd, passive: true).queue, qd, "passive")
  eq(ch.queue(name("q.excl"), exclusive: true).name, name("q.excl"), "exclusive")
  qa = ch.queue(name("q.ad"), auto_delete: true)
  sn = temp_queue(ch).name
  assert(sn =~ /\Aamq\.gen-[A-Za-z0-9_-]{22}\z/, "server-named #{sn.inspect}")
  cons = qa.subscribe { |*_a| }
  cons.cancel
  expect_channel_close(Bunny::NotFound, 404, not_found("queue", qa.name)) do
    ch.queue_declare(qa.name, passive: true)
  end
  eq(c.create_channel.queue_delete(qd).message_count, 0, "delete-ok count")
end

check("queue_declare_ok_counts") do |c, ch|
  q = temp_queue(ch)
  publish(ch, q, "m0", "m1", "m2")
  wait_until { q.message_count == 3 }
  eq([q.message_count, q.consumer_count], [3, 0], "counts before consuming")
  ch2 = c.create_channel
  q2 = existing(ch2, q.name)
  q2.subscribe(manual_ack: true) { |*_a| }
  sleep 0.3
  eq([q.message_count, q.consumer_count], [0, 1], "counts with a consumer holding them unacked")
  ch2.close
  sleep 0.2
  eq([q.message_count, q.consumer_count], [3, 0], "counts after its channel closed")
end

check("queue_passive_missing_404") do |c, ch|
  n = name("missing")
  expect_channel_close(Bunny::NotFound, 404, not_found("queue", n)) do
    ch.queue(n, passive: true)
  end
  assert(c.open?, "connection closed")
  assert(!ch.open?, "channel still open")
  begin
    temp_queue(ch)
  rescue Bunny::ChannelAlreadyClosed => e
    assert(e.message.include?(not_found("queue", n)), e.message)
  else
    raise CheckFailed, "closed channel still usable"
  end
  temp_queue(c.create_channel)
end

check("queue_reserved_name_403") do |_c, ch|
  expect_channel_close(Bunny::AccessRefused, 403,
                       "ACCESS_REFUSED - queue name 'amq.bunny#{RUN}' contains reserved prefix 'amq.*'") do
    ch.queue("amq.bunny#{RUN}")
  end
end

check("queue_delete_if_unused_if_empty") do |c, ch|
  q = declare_queue(ch, "q.del")
  publish(ch, q, "x")
  wait_until { q.message_count == 1 }
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       "PRECONDITION_FAILED - queue '#{q.name}' in vhost '/' not empty") do
    ch.queue_delete(q.name, if_empty: true)
  end
  ch = c.create_channel
  ch.basic_consume(q.name, "", true, false, nil) { |*_a| }
  ch2 = c.create_channel
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       "PRECONDITION_FAILED - queue '#{q.name}' in vhost '/' in use") do
    ch2.queue_delete(q.name, if_unused: true)
  end
  ch.close
  ch = c.create_channel
  ch.queue_delete(q.name)
  ch.queue_delete(q.name)
end

check("queue_purge_and_delete_counts") do |_c, ch|
  ch.confirm_select
  q = declare_queue(ch, "q.purge")
  publish(ch, q, *["x"] * 5)
  ch.wait_for_confirms
  eq(ch.queue_purge(q.name).message_count, 5, "purge-ok")
  publish(ch, q, *["x"] * 4)
  ch.wait_for_confirms
  eq(ch.queue_delete(q.name).message_count, 4, "delete-ok")
end

check("queue_invalid_arg_406") do |_c, ch|
  q = name("q.badarg")
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '#{q}' in vhost '/': " \
                       "\"expected integer, got longstr\"") do
    ch.queue(q, arguments: { "x-max-length" => "ten" })
  end
end

def inequivalent(arg, kind, n, detail)
  "PRECONDITION_FAILED - inequivalent arg '#{arg}' for #{kind} '#{n}' in vhost '/': #{detail}"
end

check("inequivalent_queue_durable_406") do |c, ch|
  q = declare_queue(ch, "q.ineq", durable: true).name
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       inequivalent("durable", "queue", q, "received 'false' but current is 'true'")) do
    ch.queue_declare(q, durable: false)
  end
  assert(c.open?, "connection closed")
  assert(!ch.open?, "channel still open")
end

check("inequivalent_queue_args_406") do |_c, ch|
  q = name("q.ineqargs")
  ch.queue(q, exclusive: true, arguments: { "x-max-length" => 10 })
  expect_channel_close(Bunny::PreconditionFailed, 406,
                       inequivalent("x-max-length", "queue", q, "received '20' but current is '10'")) do
    ch.queue_declare(q, exclusive: true, arguments: { "x-max-length" => 20 })
  end
end

check("inequivalent_exchange_type_406") do |c, ch|
  x = declare_exchange(ch, :direct, "ex.ineq").name
  [[->(chan) { chan.exchange_declare(x, "topic") }, "type", "received 'topic' but current is 'direct'"],
   [->(chan) { chan.exchange_declare(x, "direct", auto_delete: true) },
    "auto_delete", "received 'true' but current is 'false'"]].each do |op, arg, detail|
    expect_channel_close(Bunny::PreconditionFailed, 406, inequivalent(arg, "exchange", x, detail)) { op.call(ch) }
    ch = c.create_channel
  end
end

check("redeclare_server_named_queue_403") do |_c, ch|
  q = temp_queue(ch)
  expect_channel_close(Bunny::AccessRefused, 403,
                       "ACCESS_REFUSED - queue name '#{q.name}' contains reserved prefix 'amq.*'") do
    ch.queue_declare(q.name, exclusive: true)
  end
end

# ------------------------------------------------------------------ bindings

check("bindings_routing") do |_c, ch|
  ch.confirm_select
  d = declare_exchange(ch, :direct, "b.direct")
  f = declare_exchange(ch, :fanout, "b.fanout")
  t = declare_exchange(ch, :topic, "b.topic")
  h = declare_exchange(ch, :headers, "b.headers")
  e2e = declare_exchange(ch, :fanout, "b.e2e")
  qs = Array.new(5) { temp_queue(ch) }
  qs[0].bind(d, routing_key: "red")
  qs[1].bind(f)
  qs[2].bind(t, routing_key: "*.a.#")
  qs[3].bind(h, arguments: { "x-match" => "all", "k" => "v", "n" => 1 })
  qs[4].bind(h, arguments: { "x-match" => "any", "k" => "v", "n" => 1 })
  f.bind(e2e)
  d.publish("d1", routing_key: "red")
  d.publish("d2", routing_key: "blue")
  f.publish("f1", routing_key: "whatever")
  e2e.publish("e1")
  %w[x.a x.a.b.c a.x x.y.a].each { |rk| t.publish(rk, routing_key: rk) }
  h.publish("h-all", headers: { "k" => "v", "n" => 1 })
  h.publish("h-any", headers: { "k" => "v" })
  ch.wait_for_confirms
  eq(drain(ch, qs[0].name), ["d1"], "direct")
  eq(drain(ch, qs[1].name), %w[f1 e1], "fanout + exchange-to-exchange")
  eq(drain(ch, qs[2].name), %w[x.a x.a.b.c], "topic *.a.#")
  eq(drain(ch, qs[3].name), ["h-all"], "headers all")
  eq(drain(ch, qs[4].name), %w[h-all h-any], "headers any")
  qs[0].unbind(d, routing_key: "red")
  f.unbind(e2e)
  d.publish("d3", routing_key: "red")
  e2e.publish("e2")
  ch.wait_for_confirms
  eq(drain(ch, qs[0].name), [], "after unbind")
  eq(drain(ch, qs[1].name), [], "after exchange unbind")
end

check("bind_missing_404") do |c, ch|
  q = temp_queue(ch)
  x = name("nox")
  nq = name("noq")
  [[->(chan) { chan.queue_bind(q.name, x, routing_key: "k") }, not_found("exchange", x)],
   [->(chan) { chan.queue_bind(nq, "amq.direct", routing_key: "k") }, not_found("queue", nq)]].each do |op, text|
    expect_channel_close(Bunny::NotFound, 404, text) { op.call(ch) }
    ch = c.create_channel
  end
end

check("publish_missing_exchange_404") do |c, ch|
  x = name("nox")
  expect_async_close(ch, 404, not_found("exchange", x)) do
    ch.basic_publish("x", x, "k")
  end
  assert(c.open?, "connection closed")
  temp_queue(c.create_channel)
end

# ---------------------------------------------------------------- publishing

check("publish_confirms") do
  session do |_c, ch|
    ch.confirm_select
    q = declare_queue(ch, "q.confirm", durable: true)
    publish(ch, q, *Array.new(50) { |i| "p#{i}" }, persistent: true)
    ch.direct("amq.direct").publish("lost", routing_key: "nobody-#{RUN}")
    eq(ch.wait_for_confirms, true, "wait_for_confirms")
    eq(ch.nacked_set.to_a, [], "nacked")
    eq(ch.unconfirmed_set.to_a, [], "unconfirmed")
    eq(q.message_count, 50, "messages in queue")
  end
  no_warnings("confirms")
end

check("publish_confirms_mandatory_unroutable") do |_c, ch|
  ch.confirm_select
  x = ch.direct("amq.direct")
  returns = collect_returns(x)
  x.publish("lost", routing_key: "nobody-#{RUN}", mandatory: true)
  eq(ch.wait_for_confirms, true, "confirmed")
  assert(wait_until { returns.size == 1 }, "no basic.return")
  ri, _p, body = returns.pop
  eq([ri.reply_code, ri.reply_text, ri.exchange, ri.routing_key, body],
     [312, "NO_ROUTE", "amq.direct", "nobody-#{RUN}", "lost"], "basic.return")
end

check("mandatory_return_no_confirms") do |_c, ch|
  x = ch.default_exchange
  returns = collect_returns(x)
  x.publish("r1", routing_key: "nobody-#{RUN}", mandatory: true, headers: { "a" => 1 }, content_type: "text/plain")
  assert(wait_until { returns.size == 1 }, "no basic.return")
  ri, props, body = returns.pop
  eq([ri.reply_code, ri.reply_text, ri.exchange, ri.routing_key, body],
     [312, "NO_ROUTE", "", "nobody-#{RUN}", "r1"], "basic.return")
  eq([props.content_type, props.headers], ["text/plain", { "a" => 1 }], "returned properties")
  no_warnings("return")
end

check("properties_roundtrip") do |_c, ch|
  q = temp_queue(ch)
  ts = Time.at(1_600_000_000)
  headers = { "s" => "str", "i" => 42, "neg" => -7, "big" => 2**40, "b" => true, "f" => false,
              "l" => [1, "two", [3]], "t" => { "n" => { "x" => 1 } }, "fl" => 1.5, "ts" => ts, "none" => nil }
  publish(ch, q, "body", content_type: "application/json", content_encoding: "gzip", headers: headers,
                         persistent: true, priority: 5, correlation_id: "corr", reply_to: "rt",
                         expiration: "60000", message_id: "mid", timestamp: ts.to_i, type: "typ",
                         user_id: "guest", app_id: "app", cluster_id: "cl")
  _di, p, body = pop_wait(q)
  eq(body, "body", "body")
  got = [p.content_type, p.content_encoding, p.delivery_mode, p.priority, p.correlation_id, p.reply_to,
         p.expiration, p.message_id, p.timestamp, p.type, p.user_id, p.app_id, p.cluster_id]
  eq(got, ["application/json", "gzip", 2, 5, "corr", "rt", "60000", "mid", ts, "typ", "guest", "app", "cl"],
     "properties")
  eq(p.headers, headers, "headers")
  eq(p.headers.keys, headers.keys, "header order")
end

check("publish_user_id_mismatch_406") do |_c, ch|
  q = temp_queue(ch)
  expect_async_close(ch, 406, "PRECONDITION_FAILED - user_id property set to 'someoneelse' but " \
                              "authenticated user was 'guest'") do
    publish(ch, q, "x", user_id: "someoneelse")
  end
end

check("large_and_empty_bodies") do |_c, ch|
  q = temp_queue(ch)
  big = ((0..255).map(&:chr).join * 4096 + "tail").b
  publish(ch, q, big, "")
  _d, _p, b = pop_wait(q)
  eq([b.bytesize, b.b == big], [big.bytesize, true], "large body")
  _d, _p, b = pop_wait(q)
  eq(b, "", "empty body")
end

check("priority_queue") do |_c, ch|
  ch.confirm_select
  q = temp_queue(ch, { "x-max-priority" => 5 })
  [1, 9, 0, 3, 5, nil].each { |pr| publish(ch, q, pr.inspect, priority: pr) }
  ch.wait_for_confirms
  eq(drain(ch, q.name), %w[9 5 3 1 0 nil], "priority order")
end

check("direct_reply_to") do |c, ch|
  srv = c.create_channel
  q = temp_queue(srv)
  replies = Queue.new
  ch.basic_consume("amq.rabbitmq.reply-to", "", true, false, nil) { |_d, _p, b| replies << b }
  publish(ch, q, "ping", reply_to: "amq.rabbitmq.reply-to")
  _d, p, _b = pop_wait(q)
  assert(p && p.reply_to.start_with?("amq.rabbitmq.reply-to."), "reply_to #{p && p.reply_to.inspect}")
  srv.default_exchange.publish("pong", routing_key: p.reply_to)
  assert(wait_until { replies.size == 1 }, "no reply")
  eq(replies.pop, "pong", "reply")
end

check("alternate_exchange") do |_c, ch|
  ch.confirm_select
  ae = declare_exchange(ch, :fanout, "ex.ae")
  x = declare_exchange(ch, :direct, "ex.withae", arguments: { "alternate-exchange" => ae.name })
  q = temp_queue(ch).bind(ae)
  returns = []
  x.on_return { |*a| returns << a }
  x.publish("to-ae", routing_key: "unbound", mandatory: true)
  ch.wait_for_confirms
  di, _p, b = pop_wait(q)
  eq([b, di && di.exchange, di && di.routing_key, returns], ["to-ae", x.name, "unbound", []],
     "via alternate exchange")
end

check("overflow_reject_publish_nack") do |_c, ch|
  ch.confirm_select
  q = temp_queue(ch, { "x-max-length" => 1, "x-overflow" => "reject-publish" })
  publish(ch, q, "1", "2")
  eq(ch.wait_for_confirms, false, "wait_for_confirms")
  eq(ch.nacked_set.to_a, [2], "nacked")
  eq(q.message_count, 1, "queue length")
end

# ------------------------------------------------------------------ consuming

def subscribe_collect(q, opts = {})
  got = Queue.new
  cons = q.subscribe({ manual_ack: true }.merge(opts)) { |di, p, b| got << [di, p, b] }
  [cons, got]
end

def take(queue, n, timeout = 2)
  out = []
  deadline = Time.now + timeout
  while out.size < n && Time.now < deadline
    begin
      out << queue.pop(true)
    rescue ThreadError
      sleep 0.02
    end
  end
  out
end

# Close ch (what it left unacked goes back to q), then get the next message
# of q on a fresh channel of c: [body, redelivered?].
def next_after_close(c, ch, q)
  ch.close
  di, _p, b = pop_wait(existing(c.create_channel, q.name))
  [b, di && di.redelivered?]
end

check("consume_manual_ack") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "c0", "c1", "c2")
  cons, got = subscribe_collect(q, consumer_tag: "ctag-#{RUN}")
  eq(cons.consumer_tag, "ctag-#{RUN}", "consumer tag")
  msgs = take(got, 3)
  eq(msgs.map { |di, _p, b| [di.delivery_tag.to_i, di.redelivered?, di.consumer_tag, di.exchange, di.routing_key, b] },
     (0..2).map { |i| [i + 1, false, "ctag-#{RUN}", "", q.name, "c#{i}"] }, "deliveries")
  msgs.each { |di, _p, _b| ch.ack(di.delivery_tag) }
  cons.cancel
  eq(q.message_count, 0, "left after ack")
end

check("consume_generated_tag") do |_c, ch|
  cons = temp_queue(ch).subscribe { |*_a| }
  # bunny names its own consumers
  assert(cons.consumer_tag =~ /\Abunny-\d+-\d+\z/, "consumer tag #{cons.consumer_tag.inspect}")
end

check("nack_requeue_redelivered_headers") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "n1", headers: { "app" => "h" })
  publish(ch, q, "n2")
  ch.prefetch(1)
  cons, got = subscribe_collect(q)
  3.times do |round|
    msgs = take(got, 1)
    assert(msgs.size == 1, "round #{round}: nothing delivered")
    di, p, b = msgs[0]
    eq([b, di.redelivered?], ["n1", round.positive?], "round #{round} body, redelivered")
    eq(p.headers, { "app" => "h" }, "round #{round} headers")
    cons.cancel if round == 2
    ch.nack(di.delivery_tag, false, true)
  end
  di, p, b = pop_wait(q)
  eq([b, di.redelivered?, p.headers], ["n1", true, { "app" => "h" }], "get after nacks")
end

check("reject_requeue_no_headers_added") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "r1")
  di, p, _b = pop_wait(q, manual_ack: true)
  eq(p.headers, nil, "first delivery headers")
  ch.reject(di.delivery_tag, true)
  di, p, _b = pop_wait(q, manual_ack: true)
  eq([di.redelivered?, p.headers], [true, nil], "redelivered, headers after reject")
  ch.ack(di.delivery_tag)
end

check("nack_multiple") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "0", "1", "2", "3")
  tags = Array.new(4) { pop_wait(q, manual_ack: true)[0].delivery_tag.to_i }
  eq(tags, [1, 2, 3, 4], "tags")
  ch.nack(3, true, true)
  out = Array.new(3) { di, _p, b = q.pop(manual_ack: true); [b, di.redelivered?] }
  eq(out, [["0", true], ["1", true], ["2", true]], "requeued in original order")
  eq(q.pop(manual_ack: true)[0], nil, "no more ready")
end

check("basic_get") do |_c, ch|
  q = temp_queue(ch)
  eq(q.pop, [nil, nil, nil], "get-empty")
  publish(ch, q, "g0", "g1", "g2", content_type: "text/plain")
  di, p, b = pop_wait(q, manual_ack: true)
  eq([di.delivery_tag.to_i, di.redelivered?, di.exchange, di.routing_key, di.instance_variable_get(:@get_ok).message_count, b, p.content_type],
     [1, false, "", q.name, 2, "g0", "text/plain"], "get-ok")
  ch.ack(di.delivery_tag)
  di, _p, _b = q.pop
  eq([di.delivery_tag.to_i, di.instance_variable_get(:@get_ok).message_count], [2, 1], "get-ok no-ack")
  nq = name("noq")
  expect_channel_close(Bunny::NotFound, 404, not_found("queue", nq)) do
    ch.basic_get(nq)
  end
end

check("qos_prefetch") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "0", "1", "2", "3", "4", "5")
  ch.prefetch(2)
  _cons, got = subscribe_collect(q)
  sleep 0.5
  eq(got.size, 2, "in flight with prefetch 2")
  msgs = take(got, 2)
  ch.ack(msgs.last[0].delivery_tag, true)
  sleep 0.5
  eq(got.size, 2, "after acking both")
end

check("qos_global_per_channel") do |_c, ch|
  q1 = temp_queue(ch)
  q2 = temp_queue(ch)
  5.times do
    publish(ch, q1, "a")
    publish(ch, q2, "b")
  end
  ch.basic_qos(3, true)
  got = Queue.new
  q1.subscribe(manual_ack: true) { |*a| got << a }
  q2.subscribe(manual_ack: true) { |*a| got << a }
  sleep 0.5
  eq(got.size, 3, "in flight with global prefetch 3 over two consumers")
end

check("consumer_cancel_notify_on_queue_delete") do |c, ch|
  q = ch.queue(name("q.cancel"))
  cancels = Queue.new
  cons = Bunny::Consumer.new(ch, q, ch.generate_consumer_tag, false)
  cons.on_delivery { |*_a| }
  cons.on_cancellation { |m| cancels << m }
  q.subscribe_with(cons)
  c.create_channel.queue_delete(q.name)
  assert(wait_until { cancels.size == 1 }, "no basic.cancel from the server")
  m = cancels.pop
  eq([m.consumer_tag, m.nowait], [cons.consumer_tag, true], "basic.cancel")
  assert(ch.open?, "channel closed")
  temp_queue(ch)
  no_warnings("cancel notification")
end

check("basic_cancel_requeues_on_close") do |c, ch|
  q = declare_queue(ch, "q.cancel2")
  publish(ch, q, "x")
  cons, got = subscribe_collect(q)
  eq(take(got, 1).size, 1, "delivered")
  cons.cancel
  eq(next_after_close(c, ch, q), ["x", true], "requeued after channel close")
end

check("duplicate_consumer_tag_530") do
  sink = ErrorSink.new
  c = connect(automatically_recover: false, recover_from_connection_close: false, session_error_handler: sink)
  ch = c.create_channel
  q = temp_queue(ch)
  ch.basic_consume(q.name, "dup", true, false, nil) { |*_a| }
  begin
    ch.basic_consume(q.name, "dup", true, false, nil) { |*_a| }
  rescue Exception # rubocop:disable Lint/RescueException
    nil # bunny may time out waiting for consume-ok
  end
  assert(wait_until(3) { sink.errors.size.positive? }, "no connection-level error")
  e = sink.errors.pop
  eq([e.class, e.connection_close && e.connection_close.reply_code, e.connection_close && e.connection_close.reply_text],
     [Bunny::NotAllowedError, 530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"], "connection.close")
end

check("exclusive_consumer_403") do |c, ch|
  q = temp_queue(ch)
  q.subscribe(exclusive: true) { |*_a| }
  ch2 = c.create_channel
  expect_channel_close(Bunny::AccessRefused, 403, "ACCESS_REFUSED - queue '#{q.name}' in vhost '/' in exclusive use") do
    ch2.basic_consume(q.name, "", true, false, nil) { |*_a| }
  end
end

check("exclusive_queue_other_connection_405") do
  q = name("q.locked")
  text = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '#{q}' in vhost '/'. " \
         "It could be originally declared on another connection or the exclusive property value " \
         "does not match that of the original declaration."
  session do |_c1, ch1|
    ch1.queue(q, exclusive: true)
    session do |c2, _ch2|
      [
        ->(ch) { ch.queue_declare(q, exclusive: true) },
        ->(ch) { ch.queue_declare(q) },
        ->(ch) { ch.queue_declare(q, passive: true) },
        ->(ch) { ch.basic_consume(q, "", true, false, nil) { |*_a| } },
        ->(ch) { ch.basic_get(q) },
        ->(ch) { ch.queue_delete(q) },
        ->(ch) { ch.queue_purge(q) },
        ->(ch) { ch.queue_bind(q, "amq.fanout") }
      ].each do |op|
        ch2 = c2.create_channel
        expect_channel_close(Bunny::ResourceLocked, 405, text) { op.call(ch2) }
      end
      ch2 = c2.create_channel
      ch2.default_exchange.publish("publishing is allowed", routing_key: q)
      temp_queue(ch2)
      eq(ch1.queue_declare(q, passive: true).message_count, 1, "published by the other connection")
    end
  end
  session do |_c3, ch3|
    expect_channel_close(Bunny::NotFound, 404, not_found("queue", q)) do
      ch3.queue_declare(q, passive: true)
    end
  end
end

check("unknown_delivery_tag_406") do |c, ch|
  errors = Queue.new
  ch.on_error { |_ch, close| errors << close }
  ch.basic_ack(42, false)
  assert(wait_until { errors.size == 1 }, "no channel.close")
  m = errors.pop
  eq([m.reply_code, m.reply_text], [406, "PRECONDITION_FAILED - unknown delivery tag 42"], "channel.close")
  assert(c.open?, "connection closed")
  temp_queue(c.create_channel)
end

check("single_active_consumer") do |c, ch|
  ch2 = c.create_channel
  q = temp_queue(ch, { "x-single-active-consumer" => true })
  got = Queue.new
  c1 = q.subscribe(manual_ack: true) { |di, _p, b| got << ["c1", b]; ch.ack(di.delivery_tag) }
  existing(ch2, q.name).subscribe(manual_ack: true) { |di, _p, b| got << ["c2", b]; ch2.ack(di.delivery_tag) }
  publish(ch, q, "0", "1", "2")
  first = take(got, 3)
  c1.cancel
  publish(ch, q, "3")
  eq(first + take(got, 1), [%w[c1 0], %w[c1 1], %w[c1 2], %w[c2 3]], "deliveries")
end

check("consumer_priority") do |_c, ch|
  q = temp_queue(ch)
  got = Queue.new
  q.subscribe(arguments: { "x-priority" => 1 }) { |*_a| got << "low" }
  q.subscribe(arguments: { "x-priority" => 10 }) { |*_a| got << "high" }
  publish(ch, q, *["x"] * 4)
  eq(take(got, 4), ["high"] * 4, "deliveries")
end

check("unacked_requeued_on_connection_close") do
  out = session do |_c, ch|
    q = declare_queue(ch, "q.requeue")
    publish(ch, q, "0", "1", "2")
    session do |_c2, ch2|
      2.times { pop_wait(existing(ch2, q.name), manual_ack: true) }
    end
    Array.new(3) { di, _p, b = pop_wait(q); [b, di && di.redelivered?] }
  end
  eq(out, [["0", true], ["1", true], ["2", false]], "order and redelivered after requeue")
end

# ----------------------------------------------------- dead-lettering and TTL

# src.SUFFIX dead-letters to the fanout dlx.SUFFIX, bound to dlq.SUFFIX; all
# three are deleted after the check.
def death_setup(ch, suffix, qargs)
  dlx = declare_exchange(ch, :fanout, "dlx.#{suffix}")
  dlq = declare_queue(ch, "dlq.#{suffix}").bind(dlx)
  src = declare_queue(ch, "src.#{suffix}", arguments: { "x-dead-letter-exchange" => dlx.name }.merge(qargs))
  [dlx, dlq, src]
end

# Get one message from q and reject it (no requeue).
def reject_one(ch, q)
  di, _p, _b = pop_wait(q, manual_ack: true)
  assert(di, "nothing in #{q.name}")
  ch.reject(di.delivery_tag, false)
end

def norm_deaths(h)
  # the time field: check its class, then blank it out; x-last-death-* is
  # checked on its own (dlx_x_last_death_headers)
  h = h.reject { |k, _| k.start_with?("x-last-death-") }
  if h["x-death"].is_a?(Array)
    h["x-death"] = h["x-death"].map do |d|
      d = d.dup
      d["time"] = d["time"].is_a?(Time) ? :a_time : d["time"]
      d
    end
  end
  h
end

# One x-death table as norm_deaths leaves it.
def death(count, reason, queue, exchange, routing_keys)
  { "count" => count, "reason" => reason, "queue" => queue, "time" => :a_time, "exchange" => exchange,
    "routing-keys" => routing_keys }
end

# The headers (as norm_deaths leaves them) of a message dead-lettered once,
# from queue, as RabbitMQ 3.10 writes them; death_extra: more x-death fields.
def death_headers(reason, queue, exchange, routing_keys, death_extra = {})
  { "x-death" => [death(1, reason, queue, exchange, routing_keys).merge(death_extra)],
    "x-first-death-exchange" => exchange, "x-first-death-queue" => queue, "x-first-death-reason" => reason }
end

check("dlx_reject_headers_exact") do |_c, ch|
  dlx, dlq, src = death_setup(ch, "rej", {})
  publish(ch, src, "dead", headers: { "app" => "v" }, content_type: "text/plain")
  reject_one(ch, src)
  di, p, _b = pop_wait(dlq)
  assert(di, "nothing dead-lettered")
  eq([di.exchange, di.routing_key, di.redelivered?, p.content_type], [dlx.name, src.name, false, "text/plain"],
     "dead-lettered get-ok")
  eq(norm_deaths(p.headers), { "app" => "v" }.merge(death_headers("rejected", src.name, "", [src.name])),
     "dead-lettered headers")
end

check("dlx_x_last_death_headers") do |_c, ch|
  _dlx, dlq, src = death_setup(ch, "last", {})
  publish(ch, src, "dead")
  reject_one(ch, src)
  _di, p, _b = pop_wait(dlq)
  extra = p.headers.select { |k, _| k.start_with?("x-last-death-") }
  # RabbitMQ 3.10 writes none; 3.13 and later (and railmq) write these.
  unless extra.empty?
    eq(extra, { "x-last-death-queue" => src.name, "x-last-death-reason" => "rejected", "x-last-death-exchange" => "" },
       "x-last-death-* headers (as RabbitMQ 3.13+)")
  end
end

check("dlx_header_table_order") do
  bad = []
  session do |_c, ch|
    _dlx, dlq, src = death_setup(ch, "ord", {})
    publish(ch, src, *["o"] * 5, headers: { "zz" => 1, "app" => "v", "Mid" => 2 })
    5.times do
      reject_one(ch, src)
      _di, p, _b = pop_wait(dlq)
      keys = p.headers.keys.reject { |k| k.start_with?("x-last-death-") }
      want = %w[Mid app x-death x-first-death-exchange x-first-death-queue x-first-death-reason zz]
      bad << "headers #{keys}" if keys != want
      fields = p.headers["x-death"][0].keys
      bad << "x-death #{fields}" if fields != %w[count reason queue time exchange routing-keys]
    end
  end
  assert(bad.empty?, "#{bad.size} of 10 tables in another order, e.g. #{bad.first(2)}")
end

def cc_bcc_publish(ch)
  x = declare_exchange(ch, :direct, "x.cc")
  qs = %w[orig cc1 bcc1].map { |rk| temp_queue(ch).bind(x, routing_key: rk) }
  x.publish("d", routing_key: "orig", headers: { "a" => 1, "CC" => ["cc1"], "BCC" => ["bcc1"] })
  qs.map { |q| pop_wait(q) }
end

check("cc_bcc_routing") do
  got = session { |_c, ch| cc_bcc_publish(ch) }
  eq(got.map { |di, _p, _b| di && di.routing_key }, %w[orig orig orig],
     "routing key seen by the queues bound to orig, cc1, bcc1 (nil: not routed)")
end

check("bcc_header_removed") do
  _di, p, _b = session { |_c, ch| cc_bcc_publish(ch)[0] }
  eq(p.headers, { "a" => 1, "CC" => ["cc1"] }, "delivered headers (BCC removed)")
end

# x.dlSUFFIX -> src (bound with "orig", dead-letters to the direct dlx.SUFFIX,
# with the arguments dl_args) -> a queue bound to dlx.SUFFIX with dlq_key. A
# message published with a CC header is nacked from src; returns the
# exchange, src and the dead-lettered copy [delivery info, properties] (nil
# when none arrived).
def cc_dead_letter(ch, suffix, dlq_key, dl_args = {})
  x = declare_exchange(ch, :direct, "x.dl#{suffix}")
  dlx = declare_exchange(ch, :direct, "dlx.#{suffix}")
  dlq = temp_queue(ch).bind(dlx, routing_key: dlq_key)
  src = temp_queue(ch, { "x-dead-letter-exchange" => dlx.name }.merge(dl_args)).bind(x, routing_key: "orig")
  x.publish("d", routing_key: "orig", headers: { "CC" => ["cc1"] })
  di, _p, _b = pop_wait(src, manual_ack: true)
  ch.nack(di.delivery_tag, false, false)
  di, p, _b = pop_wait(dlq)
  [x, src, di, p]
end

check("dlx_cc_routing_keys") do |_c, ch|
  x, src, di, p = cc_dead_letter(ch, "cc", "cc1")
  assert(di, "dead-lettered copy not routed by its CC key")
  eq(norm_deaths(p.headers), { "CC" => ["cc1"] }.merge(death_headers("rejected", src.name, x.name, %w[orig cc1])),
     "dead-lettered headers")
end

check("dlx_routing_key_drops_cc") do |_c, ch|
  x, src, di, p = cc_dead_letter(ch, "rk", "dead-rk", "x-dead-letter-routing-key" => "dead-rk")
  assert(di, "nothing dead-lettered")
  eq(di.routing_key, "dead-rk", "routing key")
  eq(norm_deaths(p.headers), death_headers("rejected", src.name, x.name, %w[orig cc1]),
     "dead-lettered headers (CC removed)")
end

check("dlx_cycle_count_increments") do |_c, ch|
  dlx = declare_exchange(ch, :fanout, "dlx.cyc")
  src_name = name("src.cyc")
  dlq = declare_queue(ch, "dlq.cyc", arguments: { "x-dead-letter-exchange" => "",
                                                  "x-dead-letter-routing-key" => src_name })
  dlq.bind(dlx)
  src = declare_queue(ch, "src.cyc", arguments: { "x-dead-letter-exchange" => dlx.name })
  publish(ch, src, "cyc")
  [src, dlq, src].each { |q| reject_one(ch, q) }
  _di, p, _b = pop_wait(dlq)
  h = norm_deaths(p.headers)
  eq(h["x-death"], [death(2, "rejected", src_name, "", [src_name]), death(1, "rejected", dlq.name, dlx.name, [src_name])],
     "x-death")
  eq(h.reject { |k, _| k == "x-death" },
     { "x-first-death-exchange" => "", "x-first-death-queue" => src_name, "x-first-death-reason" => "rejected" },
     "x-first-death-* (the first death, not the last)")
end

check("ttl_queue") do |_c, ch|
  q = temp_queue(ch, { "x-message-ttl" => 200 })
  publish(ch, q, "t")
  sleep 0.5
  eq(q.pop[0], nil, "expired message still there")
  eq(q.message_count, 0, "count")
end

check("ttl_message_expiration") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "short", expiration: "150")
  publish(ch, q, "long", expiration: "60000")
  sleep 0.5
  _d, p, b = q.pop
  eq([b, p && p.expiration], ["long", "60000"], "survivor")
  eq(q.pop[0], nil, "queue empty")
  expect_async_close(ch, 406, "PRECONDITION_FAILED - invalid expiration 'soon': no_integer") do
    publish(ch, q, "x", expiration: "soon")
  end
end

check("ttl_expired_dead_letter_headers") do |_c, ch|
  _dlx, dlq, src = death_setup(ch, "exp", { "x-message-ttl" => 100 })
  publish(ch, src, "q-ttl")
  publish(ch, src, "m-ttl", expiration: "50")
  _d1, p1, b1 = pop_wait(dlq)
  _d2, p2, b2 = pop_wait(dlq)
  eq([b1, b2], %w[q-ttl m-ttl], "dead-lettered bodies")
  eq(norm_deaths(p1.headers), death_headers("expired", src.name, "", [src.name]), "queue-ttl dead-letter headers")
  eq(norm_deaths(p2.headers), death_headers("expired", src.name, "", [src.name], "original-expiration" => "50"),
     "message-ttl dead-letter headers")
  eq(p2.expiration, nil, "expiration removed")
end

check("queue_expires") do |_c, ch|
  q = name("q.expires")
  ch.queue(q, arguments: { "x-expires" => 300 })
  sleep 1
  expect_channel_close(Bunny::NotFound, 404, not_found("queue", q)) do
    ch.queue_declare(q, passive: true)
  end
end

check("queue_type_classic") do |_c, ch|
  q = declare_queue(ch, "q.classic", arguments: { "x-queue-type" => "classic" })
  ch.queue_declare(q.name)
end

check("queue_type_quorum") do |_c, ch|
  q = declare_queue(ch, "q.quorum", durable: true, arguments: { "x-queue-type" => "quorum" })
  publish(ch, q, "qq")
  di, _p, b = pop_wait(q, manual_ack: true)
  eq(b, "qq", "body")
  # A reject counts toward x-delivery-count on RabbitMQ 3.10.8 and 4.3
  # alike (4.3's nack raises only x-acquired-count: docs/features.md).
  ch.reject(di.delivery_tag, true)
  di, p, _b = pop_wait(q)
  eq([di.redelivered?, (p.headers || {})["x-delivery-count"]], [true, 1], "quorum redelivery")
end

check("queue_type_stream") do |_c, ch|
  # A stream (RabbitMQ 3.9+): a prefetch is required, acks are credit,
  # each consumer reads from its own x-stream-offset, and every delivery
  # carries its offset in the x-stream-offset header.
  st = declare_queue(ch, "q.stream", durable: true, arguments: { "x-queue-type" => "stream" })
  ch.confirm_select
  publish(ch, st, "s0", "s1", "s2")
  ch.wait_for_confirms
  ch.prefetch(10)
  got = Queue.new
  st.subscribe(manual_ack: true, arguments: { "x-stream-offset" => "first" }) do |di, p, b|
    got << [b, (p.headers || {})["x-stream-offset"]]
    ch.ack(di.delivery_tag)
  end
  eq(take(got, 3, 5), [["s0", 0], ["s1", 1], ["s2", 2]], "stream from first")
end

check("ttl_zero_delivers_to_waiting_consumer") do |_c, ch|
  q = temp_queue(ch, { "x-message-ttl" => 0 })
  publish(ch, q, "gone")
  sleep 0.2
  eq(q.pop[0], nil, "ttl 0 with no consumer")
  got = Queue.new
  q.subscribe { |_d, _p, b| got << b }
  publish(ch, q, "live0", "live1", "live2")
  eq(take(got, 3), %w[live0 live1 live2], "ttl 0 with a waiting consumer")
  q2 = temp_queue(ch)
  got2 = Queue.new
  q2.subscribe { |_d, p, b| got2 << [b, p.expiration] }
  publish(ch, q2, "m", expiration: "0")
  eq(take(got2, 1), [["m", "0"]], "expiration 0 with a waiting consumer")
end

# bunny encodes Ruby integers as signed 64-bit ('l'), RabbitMQ's "long"
BUNNY_ARG_CASES = [
  [{ "x-queue-mode" => "eager" },
   "PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue '%s' in vhost '/': \"unsupported queue mode 'eager'\""],
  [{ "x-dead-letter-exchange" => 5 },
   "PRECONDITION_FAILED - invalid type 'long' for arg 'x-dead-letter-exchange' in queue '%s' in vhost '/'"],
  [{ "x-single-active-consumer" => "yes" },
   "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '%s' in vhost '/': {unacceptable_type,longstr}"],
  [{ "x-message-ttl" => 2**40 },
   "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '%s' in vhost '/': {value_too_large,1099511627776}"],
  [{ "x-max-priority" => 256 },
   "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '%s' in vhost '/': {max_value_exceeded,256}"],
  [{ "x-overflow" => "sideways" },
   "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue '%s' in vhost '/': invalid_overflow"],
  [{ "x-expires" => 0 }, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue '%s' in vhost '/': {value_zero,0}"]
].freeze

check("queue_argument_validation") do
  c = connect
  bad = []
  BUNNY_ARG_CASES.each_with_index do |(args, text), i|
    ch = c.create_channel
    q = name("q.args#{i}")
    got = begin
      ch.queue_declare(q, exclusive: true, arguments: args)
      nil
    rescue Bunny::ChannelLevelException => e
      "#{e.channel_close.reply_code} #{e.channel_close.reply_text}"
    end
    want = "406 #{format(text, q)}"
    bad << "#{args}: got #{got.inspect}, want #{want.inspect}" if got != want
    ch.close if ch.open?
  end
  c.close
  assert(bad.empty?, bad.join("; "))
end

# ------------------------------------------------------- transactions, recover

check("tx_commit_rollback") do |c, ch|
  other = c.create_channel
  q = temp_queue(ch)
  count = -> { other.queue_declare(q.name, passive: true).message_count }
  ch.tx_select
  publish(ch, q, "rolled back")
  ch.tx_rollback
  publish(ch, q, "committed")
  eq(count.call, 0, "visible before commit")
  ch.tx_commit
  eq(count.call, 1, "visible after commit")
  di, _p, b = q.pop(manual_ack: true)
  eq(b, "committed", "body")
  ch.ack(di.delivery_tag)
  ch.tx_rollback
  ch.ack(di.delivery_tag)
  ch.tx_commit
  ch.close
  eq(count.call, 0, "committed ack")
end

check("tx_rollback_ack_keeps_message") do |c, ch|
  q = temp_queue(ch)
  publish(ch, q, "m")
  ch.tx_select
  di, _p, _b = pop_wait(q, manual_ack: true)
  ch.ack(di.delivery_tag)
  ch.tx_rollback
  eq(next_after_close(c, ch, q), ["m", true], "after rolled-back ack and channel close")
end

check("tx_errors_406") do
  c = connect
  [[nil, :tx_commit, "channel is not transactional"],
   [nil, :tx_rollback, "channel is not transactional"],
   [:tx_select, :confirm_select, "cannot switch from tx to confirm mode"],
   [:confirm_select, :tx_select, "cannot switch from confirm to tx mode"]].each do |first, method, text|
    ch = c.create_channel
    ch.public_send(first) if first
    expect_channel_close(Bunny::PreconditionFailed, 406, "PRECONDITION_FAILED - #{text}") { ch.public_send(method) }
  end
  c.close
end

check("basic_recover_requeue") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "rec")
  pop_wait(q, manual_ack: true)
  ch.basic_recover(true)
  di, _p, b = q.pop(manual_ack: true)
  eq([b, di && di.redelivered?, di && di.delivery_tag.to_i], ["rec", true, 2], "after recover")
  ch.ack(di.delivery_tag)
end

check("basic_recover_consumer_requeue") do |_c, ch|
  q = temp_queue(ch)
  publish(ch, q, "rec")
  _cons, got = subscribe_collect(q)
  first = take(got, 1)
  ch.recover
  second = take(got, 1)
  eq((first + second).map { |di, _p, b| [di.delivery_tag.to_i, di.redelivered?, b] },
     [[1, false, "rec"], [2, true, "rec"]], "deliveries around recover")
end

check("channel_flow_active") do |_c, ch|
  eq(ch.channel_flow(true).active, true, "flow-ok")
end

# ---------------------------------------------------------------------------

run_checks
begin
  c = connect
  %w[q.durable q.confirm q.purge q.ineq q.del q.cancel q.cancel2 q.expires q.requeue q.quorum q.stream q.classic].each do |n|
    c.create_channel.queue_delete(name(n))
  end
  c.close
rescue Exception # rubocop:disable Lint/RescueException
  nil
end
puts "#{CHECKS.size} checks, #{FAILS.size} failed"
exit(FAILS.empty? ? 0 : 1)
