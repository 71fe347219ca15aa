package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Definitions, in RabbitMQ's format (GET and POST /api/definitions,
// --load-definitions): users, vhosts, permissions, topic permissions,
// vhost limits (as RabbitMQ's "vhost-limits" parameters), exchanges,
// queues and bindings. An import checks the whole file before it changes
// anything, and names the entry that is wrong.

// defsVersion is the RabbitMQ version whose definitions format this is.
const defsVersion = "3.10.8"

type defsFile struct {
	RabbitVersion    string          `json:"rabbit_version,omitempty"`
	RabbitMQVersion  string          `json:"rabbitmq_version,omitempty"`
	ProductName      string          `json:"product_name,omitempty"`
	ProductVersion   string          `json:"product_version,omitempty"`
	Users            []defsUser      `json:"users"`
	VHosts           []defsVHost     `json:"vhosts"`
	Permissions      []defsPerm      `json:"permissions"`
	TopicPermissions []defsTopic     `json:"topic_permissions"`
	Parameters       []defsParameter `json:"parameters"`
	GlobalParameters []any           `json:"global_parameters"`
	Policies         []defsPolicy    `json:"policies"`
	Queues           []defsQueue     `json:"queues"`
	Exchanges        []defsExchange  `json:"exchanges"`
	Bindings         []defsBinding   `json:"bindings"`
}

type defsUser struct {
	Name             string           `json:"name"`
	Password         *string          `json:"password,omitempty"`
	PasswordHash     string           `json:"password_hash"`
	HashingAlgorithm string           `json:"hashing_algorithm"`
	Tags             any              `json:"tags"` // a list, or RabbitMQ 3.8's comma-separated string
	Limits           map[string]int64 `json:"limits"`
}

// defsVHost is a vhost as RabbitMQ's exports carry one: the name alone
// (3.10 to 3.12), with description, tags, default_queue_type and metadata
// (3.13, 4.0), description, tags and metadata (4.1, 4.2), or limits and
// metadata (4.3) (rabbit_mgmt_wm_definitions.erl, rabbit_definitions.erl
// vhost_definition at those tags). An import reads description and tags
// at the top level first, then in the metadata, and the default queue
// type in the metadata only (rabbit_definitions.erl add_vhost, v3.10.8 to
// v4.3.5). A 4.3 vhost's limits are in the file twice, here and as a
// vhost-limits parameter: the import reads the parameter, as RabbitMQ's.
type defsVHost struct {
	Name             string         `json:"name"`
	Description      string         `json:"description"`
	Tags             any            `json:"tags"`
	DefaultQueueType string         `json:"default_queue_type,omitempty"` // exported only
	Metadata         *defsVHostMeta `json:"metadata,omitempty"`
}

type defsVHostMeta struct {
	Description      string `json:"description"`
	Tags             any    `json:"tags"`
	DefaultQueueType any    `json:"default_queue_type,omitempty"`
}

type defsPerm struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

type defsTopic struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

type defsParameter struct {
	VHost     string `json:"vhost"`
	Component string `json:"component"`
	Name      string `json:"name"`
	Value     any    `json:"value"` // an object; RabbitMQ 3.x exports cleared vhost limits as []
}

type defsPolicy struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

type defsQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type defsExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type defsBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// exportDefinitions is srv's definitions, those of one vhost when only is
// not "".
func exportDefinitions(srv *broker.Server, only string) defsFile {
	d := defsFile{RabbitVersion: defsVersion, RabbitMQVersion: defsVersion, ProductName: "railmq", ProductVersion: srv.Version(),
		Users: []defsUser{}, VHosts: []defsVHost{}, Permissions: []defsPerm{}, TopicPermissions: []defsTopic{},
		Parameters: []defsParameter{}, GlobalParameters: []any{}, Policies: []defsPolicy{},
		Queues: []defsQueue{}, Exchanges: []defsExchange{}, Bindings: []defsBinding{}}
	if only == "" {
		for _, u := range srv.Access().Users() {
			algo := u.Algo
			if algo == "" {
				algo = auth.SHA256
			}
			limits := u.Limits
			if limits == nil {
				limits = map[string]int64{}
			}
			d.Users = append(d.Users, defsUser{Name: u.Name, PasswordHash: auth.EncodeHash(u.Hash), HashingAlgorithm: algo,
				Tags: tagList(u.Tags), Limits: limits})
		}
		for _, p := range srv.Access().Permissions() {
			d.Permissions = append(d.Permissions, defsPerm{p.User, p.VHost, p.Configure, p.Write, p.Read})
		}
		for _, t := range srv.Access().TopicPermissions() {
			d.TopicPermissions = append(d.TopicPermissions, defsTopic{t.User, t.VHost, t.Exchange, t.Write, t.Read})
		}
		d.GlobalParameters = exportGlobals(srv) // definitions_vhost.go
	}
	for _, st := range srv.VHosts() {
		vh := st.Name()
		if only != "" && vh != only {
			continue
		}
		if only == "" {
			d.VHosts = append(d.VHosts, vhostDef(vh, st.Rec))
		}
		if st.Rec.Limits != nil {
			var val any = []any{} // limits set and cleared: RabbitMQ 3.x exports [] (3.10.8, asked)
			if len(st.Rec.Limits) > 0 {
				m := map[string]any{}
				for k, v := range st.Rec.Limits {
					m[k] = v
				}
				val = m
			}
			d.Parameters = append(d.Parameters, defsParameter{VHost: vh, Component: "vhost-limits", Name: "limits", Value: val})
		}
		pols, ops := st.Policies()
		for _, p := range pols {
			d.Policies = append(d.Policies, defsPolicy{VHost: vh, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo, Definition: p.Definition, Priority: p.Priority})
		}
		for _, p := range ops {
			d.Parameters = append(d.Parameters, operatorPolicyParam(vh, p))
		}
		for _, p := range srv.Parameters("", vh) {
			d.Parameters = append(d.Parameters, defsParameter{VHost: vh, Component: p.Component, Name: p.Name, Value: decodeValue(p.Value)})
		}
		xs := st.Exchanges()
		sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
		for _, x := range xs {
			if strings.HasPrefix(x.Name, "amq.") {
				continue
			}
			d.Exchanges = append(d.Exchanges, defsExchange{Name: x.Name, VHost: vh, Type: x.Type(), Durable: x.Durable,
				AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: jsonTable(x.Args)})
		}
		qs := st.Queues()
		sort.Slice(qs, func(i, j int) bool { return qs[i].Name() < qs[j].Name() })
		for _, q := range qs {
			c := q.Config()
			if c.Exclusive {
				continue
			}
			d.Queues = append(d.Queues, defsQueue{Name: c.Name, VHost: vh, Durable: c.Durable, AutoDelete: c.AutoDelete, Arguments: jsonTable(c.Args)})
		}
		for _, x := range xs {
			for _, b := range x.Bindings() {
				dt := "queue"
				if b.Dest.Exchange {
					dt = "exchange"
				}
				d.Bindings = append(d.Bindings, defsBinding{Source: x.Name, VHost: vh, Destination: b.Dest.Name, DestinationType: dt,
					RoutingKey: b.Key, Arguments: jsonTable(b.Args)})
			}
		}
	}
	return d
}

func (a *API) apiGetDefinitions(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if vh != "" && a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	if vh != "" {
		writeJSON(w, vhostDefinitions(exportDefinitions(a.srv, vh))) // definitions_vhost.go
		return
	}
	a.globalParameters() // the cluster's id, made if it has none yet
	writeJSON(w, exportDefinitions(a.srv, vh))
}

func (a *API) apiPostDefinitions(w http.ResponseWriter, r *http.Request) {
	var d defsFile
	dec := json.NewDecoder(r.Body) // capped at Options.MaxBodySize (guard.go)
	if err := dec.Decode(&d); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			bodyTooLarge(w)
			return
		}
		badRequest(w, "failed_to_parse_json")
		return
	}
	if vh := r.PathValue("vhost"); vh != "" {
		if a.srv.LookupVHost(vh) == nil {
			notFound(w)
			return
		}
		d.retarget(vh)
	}
	if err := importDefinitions(a.srv, &d); err != nil {
		var pe *parameterError
		if errors.As(err, &pe) && r.PathValue("vhost") != "" {
			// The per-vhost import prints RabbitMQ's reason as a binary.
			badRequest(w, erlangBinary(pe.reason))
			return
		}
		badRequest(w, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// retarget makes a vhost's file (exported without vhost fields) apply to
// vh, as RabbitMQ's POST /api/definitions/{vhost}.
func (d *defsFile) retarget(vh string) {
	d.Users, d.VHosts, d.Permissions, d.TopicPermissions, d.GlobalParameters = nil, nil, nil, nil, nil
	for i := range d.Queues {
		d.Queues[i].VHost = vh
	}
	for i := range d.Exchanges {
		d.Exchanges[i].VHost = vh
	}
	for i := range d.Bindings {
		d.Bindings[i].VHost = vh
	}
	for i := range d.Parameters {
		d.Parameters[i].VHost = vh
	}
	for i := range d.Policies {
		d.Policies[i].VHost = vh
	}
}

// LoadDefinitions imports a definitions file into srv
// (--load-definitions).
func LoadDefinitions(srv *broker.Server, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d defsFile
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := importDefinitions(srv, &d); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	srv.Logger().Info("definitions loaded", zap.String("file", path), zap.Int("vhosts", len(d.VHosts)), zap.Int("users", len(d.Users)),
		zap.Int("queues", len(d.Queues)), zap.Int("exchanges", len(d.Exchanges)), zap.Int("bindings", len(d.Bindings)))
	return nil
}

// importDefinitions checks every entry of d, then applies them all to
// srv.
func importDefinitions(srv *broker.Server, d *defsFile) error {
	im := &importer{srv: srv, d: d, scratch: map[string]*vhost.VHost{}, inFile: map[string]bool{}, dqt: map[string]string{}}
	defer im.close()
	if err := im.check(); err != nil {
		return err
	}
	return im.apply()
}

// importer is one import of a definitions file: check reads every entry
// into what apply needs, naming the first that is wrong; apply changes
// srv only once everything has been checked.
type importer struct {
	srv *broker.Server
	d   *defsFile

	newVHosts map[string]bool // the vhosts the file makes
	// Scratch registries for the vhosts the file makes: their
	// declarations are checked against them (and each other) before
	// anything exists.
	scratch  map[string]*vhost.VHost
	users    map[string]*auth.User // by name
	perms    []*auth.Permission    // d.Permissions' parsed
	topics   []*auth.TopicPermission
	limits   map[string]map[string]int64 // by vhost
	opPols   []opPolicy                  // the operator_policy parameters
	params   []broker.Parameter          // the runtime parameters of other components (shovel, federation)
	dqt      map[string]string           // the file's vhosts' default queue types, by vhost
	policies []*vhost.PolicyDef
	inFile   map[string]bool // vhost \x00 kind \x00 name of the file's exchanges (x) and queues (q)
}

// close closes the scratch registries.
func (im *importer) close() {
	for _, v := range im.scratch {
		v.Close()
	}
}

// check checks every entry, in the file's order of kinds: vhosts, users,
// permissions, topic permissions, vhost limits, policies, exchanges,
// queues, bindings.
func (im *importer) check() error {
	for _, step := range []func() error{im.checkVHosts, im.checkUsers, im.checkPermissions, im.checkTopicPermissions,
		im.checkParameters, im.checkGlobals, im.checkPolicies, im.checkExchanges, im.checkQueues, im.checkBindings} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func (im *importer) checkVHosts() error {
	im.newVHosts = map[string]bool{}
	for i, v := range im.d.VHosts {
		if v.Name == "" {
			return fmt.Errorf("vhosts[%d]: no name", i)
		}
		st := im.srv.LookupVHost(v.Name)
		if st == nil {
			im.newVHosts[v.Name] = true
		}
		if err := im.checkDefaultQueueType(v, st); err != nil {
			return err
		}
	}
	return nil
}

// vhostFor is the registry of vhost name: the broker's, a scratch one if
// the file makes it, or nil.
func (im *importer) vhostFor(name string) *vhost.VHost {
	if st := im.srv.LookupVHost(name); st != nil {
		return st.VHost
	}
	if !im.newVHosts[name] {
		return nil
	}
	if im.scratch[name] == nil {
		im.scratch[name] = vhost.New(name, nil, nil, nil, 0, 0)
		im.scratch[name].SetDefaultQueueType(im.dqt[name])
	}
	return im.scratch[name]
}

func (im *importer) checkUsers() error {
	im.users = map[string]*auth.User{}
	for i, u := range im.d.Users {
		if u.Name == "" {
			return fmt.Errorf("users[%d]: no name", i)
		}
		tags, err := auth.ParseTags(u.Tags)
		if err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
		nu := &auth.User{Name: u.Name, Algo: u.HashingAlgorithm, Tags: tags, Limits: u.Limits}
		if nu.Algo == "" {
			nu.Algo = auth.SHA256
		}
		if u.Password != nil {
			nu.Hash, err = auth.HashPassword(auth.SHA256, *u.Password)
			nu.Algo = auth.SHA256
		} else {
			nu.Hash, err = auth.DecodeHash(nu.Algo, u.PasswordHash)
		}
		if err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
		if len(nu.Limits) == 0 {
			nu.Limits = nil
		}
		im.users[u.Name] = nu
	}
	return nil
}

// userExists says whether user name is in the file or the broker.
func (im *importer) userExists(name string) bool {
	return im.users[name] != nil || im.srv.Access().User(name) != nil
}

func (im *importer) checkPermissions() error {
	im.perms = make([]*auth.Permission, len(im.d.Permissions))
	for i, p := range im.d.Permissions {
		if im.vhostFor(p.VHost) == nil {
			return fmt.Errorf("permission of %q: no vhost %q", p.User, p.VHost)
		}
		if !im.userExists(p.User) {
			return fmt.Errorf("permission in %q: no user %q", p.VHost, p.User)
		}
		pm, err := auth.NewPermission(p.Configure, p.Write, p.Read)
		if err != nil {
			return fmt.Errorf("permission of %q in %q: %w", p.User, p.VHost, err)
		}
		im.perms[i] = pm
	}
	return nil
}

func (im *importer) checkTopicPermissions() error {
	im.topics = make([]*auth.TopicPermission, len(im.d.TopicPermissions))
	for i, p := range im.d.TopicPermissions {
		if im.vhostFor(p.VHost) == nil || !im.userExists(p.User) || p.Exchange == "" {
			return fmt.Errorf("topic permission of %q in %q on %q: no such vhost, user or exchange", p.User, p.VHost, p.Exchange)
		}
		tp, err := auth.NewTopicPermission(p.Exchange, p.Write, p.Read, p.User, p.VHost)
		if err != nil {
			return fmt.Errorf("topic permission of %q in %q: %w", p.User, p.VHost, err)
		}
		im.topics[i] = tp
	}
	return nil
}

func (im *importer) checkPolicies() error {
	im.policies = make([]*vhost.PolicyDef, len(im.d.Policies))
	for i, p := range im.d.Policies {
		if im.vhostFor(p.VHost) == nil {
			return fmt.Errorf("policy %q: no vhost %q", p.Name, p.VHost)
		}
		pd, err := vhost.NewPolicyDef(p.Name, p.Pattern, p.ApplyTo, p.Priority, p.Definition, false)
		if err != nil {
			var pe *vhost.PolicyError
			if errors.As(err, &pe) {
				return fmt.Errorf("policy %q in %q: %s", p.Name, p.VHost, pe.Detail)
			}
			return fmt.Errorf("policy %q in %q: %w", p.Name, p.VHost, err)
		}
		warnMirroring(im.srv.Logger(), p.VHost, p.Name, p.Definition)
		im.policies[i] = pd
	}
	return nil
}

// exchangeDecl is the declaration of a file's exchange.
func exchangeDecl(x defsExchange) vhost.ExchangeDecl {
	return vhost.ExchangeDecl{Name: x.Name, Type: x.Type, Durable: x.Durable, AutoDelete: x.AutoDelete, Internal: x.Internal,
		Args: tableArg(map[string]any{"arguments": x.Arguments})}
}

// queueDecl is the declaration of a file's queue, with the default queue
// type its vhost will have once the file's vhosts are made.
func (im *importer) queueDecl(q defsQueue) vhost.QueueDecl {
	d := vhost.QueueDecl{Name: q.Name, Durable: q.Durable, AutoDelete: q.AutoDelete, Args: tableArg(map[string]any{"arguments": q.Arguments}), Reserved: true}
	if t, ok := im.dqt[q.VHost]; ok {
		d = vhost.WithDefaultType(d, t)
	}
	return d
}

func (im *importer) checkExchanges() error {
	for _, x := range im.d.Exchanges {
		v := im.vhostFor(x.VHost)
		if v == nil {
			return fmt.Errorf("exchange %q: no vhost %q", x.Name, x.VHost)
		}
		if strings.HasPrefix(x.Name, "amq.") {
			continue // RabbitMQ's exports never carry them; its imports skip them
		}
		if err := v.CheckExchange(exchangeDecl(x)); err != nil {
			return fmt.Errorf("exchange %q in %q: %s", x.Name, x.VHost, reasonOf(err))
		}
		im.inFile[x.VHost+"\x00x\x00"+x.Name] = true
	}
	return nil
}

func (im *importer) checkQueues() error {
	for _, q := range im.d.Queues {
		v := im.vhostFor(q.VHost)
		if v == nil {
			return fmt.Errorf("queue %q: no vhost %q", q.Name, q.VHost)
		}
		if im.existing(q) {
			im.inFile[q.VHost+"\x00q\x00"+q.Name] = true
			continue
		}
		if err := v.CheckQueue(im.queueDecl(q)); err != nil {
			return fmt.Errorf("queue %q in %q: %s", q.Name, q.VHost, reasonOf(err))
		}
		im.inFile[q.VHost+"\x00q\x00"+q.Name] = true
	}
	return nil
}

// exists says whether vhost vh has, or the file declares in it, an
// exchange (kind "x") or a queue (kind "q") called name.
func (im *importer) exists(vh, kind, name string) bool {
	if im.inFile[vh+"\x00"+kind+"\x00"+name] {
		return true
	}
	v := im.vhostFor(vh)
	if v == nil {
		return false
	}
	if kind == "x" {
		return v.Exchange(name) != nil
	}
	_, err := v.Queue(0, name)
	return err == nil
}

func (im *importer) checkBindings() error {
	for i, b := range im.d.Bindings {
		kind := map[string]string{"queue": "q", "exchange": "x"}[b.DestinationType]
		switch {
		case kind == "":
			return fmt.Errorf("bindings[%d]: destination_type %q is neither queue nor exchange", i, b.DestinationType)
		case !im.exists(b.VHost, "x", b.Source):
			return fmt.Errorf("bindings[%d]: no source exchange %q in vhost %q", i, b.Source, b.VHost)
		case !im.exists(b.VHost, kind, b.Destination):
			return fmt.Errorf("bindings[%d]: no destination %s %q in vhost %q", i, b.DestinationType, b.Destination, b.VHost)
		}
	}
	return nil
}

// apply makes what check read: vhosts, then users and permissions, vhost
// limits, exchanges, queues, bindings and policies.
func (im *importer) apply() error {
	if err := im.applyVHosts(); err != nil {
		return err
	}
	if err := im.applyAccess(); err != nil {
		return err
	}
	if err := im.applyLimits(); err != nil {
		return err
	}
	if err := im.applyExchanges(); err != nil {
		return err
	}
	start := time.Now()
	if err := im.applyQueues(start); err != nil {
		return err
	}
	if err := im.applyBindings(start); err != nil {
		return err
	}
	if err := im.applyGlobals(); err != nil { // definitions_vhost.go
		return err
	}
	return im.applyPolicies()
}

func (im *importer) applyVHosts() error {
	for _, v := range im.d.VHosts {
		rec := broker.VHostRecord{Description: v.Description, Tags: []string{}}
		tags := v.Tags
		if v.Metadata != nil {
			if rec.Description == "" {
				rec.Description = v.Metadata.Description
			}
			if tags == nil {
				tags = v.Metadata.Tags
			}
		}
		if t, err := auth.ParseTags(tags); err == nil {
			rec.Tags = t
		}
		if st := im.srv.LookupVHost(v.Name); st != nil {
			rec.Limits = st.Rec.Limits
			rec.DefaultQueueType = st.Rec.DefaultQueueType
		}
		if t, ok := im.dqt[v.Name]; ok {
			rec.DefaultQueueType = t
		}
		if _, err := im.srv.PutVHost(v.Name, rec); err != nil {
			return err
		}
	}
	return nil
}

// applyAccess stores the users, permissions and topic permissions, then
// puts them in the registry (in a cluster: replicated, and applied by
// every node as committed).
func (im *importer) applyAccess() error {
	d := im.d
	us := make([]*auth.User, len(d.Users))
	for i, u := range d.Users {
		us[i] = im.users[u.Name]
	}
	pes := make([]auth.PermissionEntry, len(d.Permissions))
	for i, p := range d.Permissions {
		pes[i] = auth.PermissionEntry{VHost: p.VHost, User: p.User, Permission: im.perms[i]}
	}
	tes := make([]auth.TopicPermissionEntry, len(d.TopicPermissions))
	for i, p := range d.TopicPermissions {
		tes[i] = auth.TopicPermissionEntry{VHost: p.VHost, User: p.User, TopicPermission: im.topics[i]}
	}
	return im.srv.PutAccess(us, pes, tes)
}

func (im *importer) applyLimits() error {
	for vh, m := range im.limits {
		st := im.srv.LookupVHost(vh)
		rec := st.Rec
		rec.Limits = m
		if _, err := im.srv.PutVHost(vh, rec); err != nil {
			return err
		}
	}
	return nil
}

func (im *importer) applyExchanges() error {
	for _, x := range im.d.Exchanges {
		if strings.HasPrefix(x.Name, "amq.") {
			continue
		}
		if err := im.srv.LookupVHost(x.VHost).DeclareExchange(exchangeDecl(x)); err != nil {
			return fmt.Errorf("exchange %q in %q: %s", x.Name, x.VHost, reasonOf(err))
		}
	}
	return nil
}

// applyQueues declares the queues, logging progress since start.
func (im *importer) applyQueues(start time.Time) error {
	qs := im.d.Queues
	for i, q := range qs {
		if im.existing(q) {
			continue
		}
		if _, _, _, err := im.srv.LookupVHost(q.VHost).DeclareQueue(im.queueDecl(q), queue.Config{}); err != nil {
			return fmt.Errorf("queue %q in %q: %s", q.Name, q.VHost, reasonOf(err))
		}
		if n := i + 1; n%importProgressEvery == 0 && n < len(qs) {
			im.srv.Logger().Info("importing definitions: queues", zap.Int("queues_so_far", n), zap.Int("queues", len(qs)), zap.Duration("took_so_far", time.Since(start)))
		}
	}
	return nil
}

// applyBindings makes the bindings, logging progress since start (that
// of the queues).
func (im *importer) applyBindings(start time.Time) error {
	bs := im.d.Bindings
	for i, bd := range bs {
		args := tableArg(map[string]any{"arguments": bd.Arguments})
		if err := im.srv.LookupVHost(bd.VHost).Bind(0, bd.Destination, bd.DestinationType == "exchange", bd.Source, bd.RoutingKey, args); err != nil {
			return fmt.Errorf("bindings[%d]: %s", i, reasonOf(err))
		}
		if n := i + 1; n%importProgressEvery == 0 && n < len(bs) {
			im.srv.Logger().Info("importing definitions: bindings", zap.Int("bindings_so_far", n), zap.Int("bindings", len(bs)), zap.Duration("took_so_far", time.Since(start)))
		}
	}
	return nil
}

func (im *importer) applyPolicies() error {
	for i, p := range im.d.Policies {
		if _, err := im.srv.PutPolicy(p.VHost, false, p.Name, im.policies[i]); err != nil {
			return err
		}
	}
	for _, p := range im.opPols {
		if _, err := im.srv.PutPolicy(p.vhost, true, p.def.Name, p.def); err != nil {
			return err
		}
	}
	for _, p := range im.params {
		if _, err := im.srv.PutParameter(p); err != nil {
			return err
		}
	}
	return nil
}

// importProgressEvery is how many queues, or bindings, an import declares
// between two progress lines in the log.
var importProgressEvery = 1000 // a variable for tests

// reasonOf is an error's text without an AMQP code name in front.
func reasonOf(err error) string {
	var e *amqp.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	t := e.Text
	if i := strings.Index(t, " - "); i >= 0 {
		return t[i+3:]
	}
	return t
}
