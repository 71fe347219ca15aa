package mgmt

import "strings"

// Routes lists a's routes as "METHOD /path/{param}".
func Routes(a *API) []string {
	var out []string
	for _, rt := range a.routes() {
		out = append(out, rt.method+" /"+strings.Join(rt.path, "/"))
	}
	return out
}

// FailedLogins is how many failed logins are counted for src.
func FailedLogins(a *API, src string) int {
	a.logins.mu.Lock()
	defer a.logins.mu.Unlock()
	return a.logins.fails[src]
}
