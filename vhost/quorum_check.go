package vhost

// checkQuorumDecl reports the error declaring d, a new quorum queue, would
// meet for its own sake (declareQuorum; CheckQueue: a definitions import
// checks every queue before it makes any): as RabbitMQ, its arguments
// first, then the properties a quorum queue cannot have (quorum_args.go),
// then the arguments every queue checks.
func (v *VHost) checkQuorumDecl(d QueueDecl) error {
	if err := checkQuorumArgs(d.Name, v.name, d.Args); err != nil {
		return err
	}
	if err := quorumProperties(d, v.name); err != nil {
		return err
	}
	_, err := validateQueueArgs(d.Name, v.name, withoutType(d.Args))
	return err
}
