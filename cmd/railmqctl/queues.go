package main

import (
	"net/url"

	"github.com/spf13/cobra"
)

// newQueuesCmd is rabbitmq-queues' membership commands for quorum
// queues, on RabbitMQ 4's management routes (mgmt/mgmtquorum.go).
func newQueuesCmd(c *client) *cobra.Command {
	queues := &cobra.Command{Use: "queues list|declare|delete|purge|show|add_member|delete_member|grow|shrink|quorum_status",
		Short: "queues (rabbitmqadmin v2's list, declare, delete, purge, show) and quorum queues' members, as rabbitmq-queues (a queue's change is made by the node that leads it)"}
	path := func(q string) string {
		return "/api/queues/quorum/" + url.PathEscape(c.vhost) + "/" + url.PathEscape(q)
	}
	var vp, qp string
	grow := &cobra.Command{Use: "grow NODE all|even", Short: "add NODE as a member of the quorum queues this node leads (all, or those with an even number of members)",
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("POST", "/api/queues/quorum/replicas/on/"+url.PathEscape(a[0])+"/grow",
				map[string]any{"vhost_pattern": vp, "queue_pattern": qp, "strategy": a[1]})
			return err
		}}
	grow.Flags().StringVar(&vp, "vhost-pattern", ".*", "vhosts whose queues grow (a regular expression)")
	grow.Flags().StringVar(&qp, "queue-pattern", ".*", "queues that grow (a regular expression)")
	queues.AddCommand(
		&cobra.Command{Use: "add_member QUEUE NODE", Short: "make NODE a member of quorum queue QUEUE", Args: cobra.ExactArgs(2),
			RunE: func(_ *cobra.Command, a []string) error {
				_, err := c.do("POST", path(a[0])+"/replicas/add", map[string]any{"node": a[1]})
				return err
			}},
		&cobra.Command{Use: "delete_member QUEUE NODE", Short: "remove NODE from quorum queue QUEUE's members", Args: cobra.ExactArgs(2),
			RunE: func(_ *cobra.Command, a []string) error {
				_, err := c.do("DELETE", path(a[0])+"/replicas/delete", map[string]any{"node": a[1]})
				return err
			}},
		grow,
		&cobra.Command{Use: "shrink NODE", Short: "remove NODE from the quorum queues this node leads (but where it is the last member)", Args: cobra.ExactArgs(1),
			RunE: func(_ *cobra.Command, a []string) error {
				_, err := c.do("DELETE", "/api/queues/quorum/replicas/on/"+url.PathEscape(a[0])+"/shrink", nil)
				return err
			}},
		&cobra.Command{Use: "quorum_status QUEUE", Short: "each member of quorum queue QUEUE: state, membership, log indexes", Args: cobra.ExactArgs(1),
			RunE: func(_ *cobra.Command, a []string) error {
				raw, err := c.do("GET", path(a[0])+"/status", nil)
				if err != nil {
					return err
				}
				return c.show(raw, []string{"Node Name", "Raft State", "Membership", "Last Applied", "Commit Index", "Term"})
			}})
	addQueueV2(c, queues)
	return queues
}
