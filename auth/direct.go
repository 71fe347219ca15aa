package auth

// DirectGrant is every permission in vhost for user: the broker's own
// direct connections (RabbitMQ's user "none", as its shovels use), whose
// access was checked when they were defined.
func DirectGrant(vhost, user string) *Grant {
	g := &Grant{User: user, VHost: vhost}
	p, _ := NewPermission(".*", ".*", ".*")
	g.perm.Store(p)
	return g
}
