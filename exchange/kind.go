package exchange

// Kind is an exchange type. The zero Kind is invalid so that an Exchange
// built without New, or from an unparsed string, cannot silently route as
// direct.
type Kind uint8

const (
	Direct Kind = iota + 1
	Fanout
	Topic
	Headers
	// Dedup is the rabbitmq-message-deduplication plugin's exchange type:
	// it routes as fanout, after dropping duplicates (see Dedup).
	Dedup
	ConsistentHash // x-consistent-hash, rabbitmq_consistent_hash_exchange's type
	// FederationUpstream is the federation plugin's helper exchange
	// (x-federation-upstream) that a downstream's link declares upstream:
	// it routes as fanout what its x-max-hops and x-received-from allow
	// (rabbit_federation_upstream_exchange.erl, v3.10.8; vhost checks).
	FederationUpstream
)

// FederationUpstreamType is FederationUpstream's type name.
const FederationUpstreamType = "x-federation-upstream"

// ParseKind maps an exchange.declare type field to a Kind. The names are
// case-sensitive, as in RabbitMQ ("Direct" is an unknown type there too).
func ParseKind(s string) (Kind, bool) {
	switch s {
	case "direct":
		return Direct, true
	case "fanout":
		return Fanout, true
	case "topic":
		return Topic, true
	case "headers":
		return Headers, true
	case "x-message-deduplication":
		return Dedup, true
	case "x-consistent-hash":
		return ConsistentHash, true
	case FederationUpstreamType:
		return FederationUpstream, true
	}
	return 0, false
}

// String returns the AMQP type name, the inverse of ParseKind.
func (k Kind) String() string {
	switch k {
	case Direct:
		return "direct"
	case Fanout:
		return "fanout"
	case Topic:
		return "topic"
	case Headers:
		return "headers"
	case Dedup:
		return "x-message-deduplication"
	case ConsistentHash:
		return "x-consistent-hash"
	case FederationUpstream:
		return FederationUpstreamType
	}
	return "invalid"
}
