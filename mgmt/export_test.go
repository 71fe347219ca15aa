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
