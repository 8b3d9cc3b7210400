package api

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	apidoc "github.com/msgpulse/msgpulse/api"
)

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Every /api operation documents the scope its route needs, as the route
// table in New has it.
func TestOpenAPIScopesMatchTheRouteTable(t *testing.T) {
	h := setup(t, options{})
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(apidoc.OpenAPI, &doc))
	documented := map[string]string{}
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/api/") {
			continue
		}
		for method, op := range ops {
			if m, ok := op.(map[string]any); ok {
				documented[strings.ToUpper(method)+" "+path], _ = m["x-msgpulse-scope"].(string)
			}
		}
	}
	registered := map[string]string{}
	for k, scope := range h.srv.scopes {
		path := k[1]
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, ":") {
				path = strings.Replace(path, seg, "{"+seg[1:]+"}", 1)
			}
		}
		registered[k[0]+" "+path] = scope.String()
	}
	require.Equal(t, registered, documented)
}

// The OpenAPI document and the registered routes describe the same API.
func TestOpenAPIMatchesRegisteredRoutes(t *testing.T) {
	h := setup(t, options{})
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(apidoc.OpenAPI, &doc))
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "delete", "patch":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	var registered []string
	for _, r := range h.srv.Routes() {
		switch r[0] {
		case "GET", "POST", "PUT", "DELETE", "PATCH":
		default:
			continue // echo's automatic not-found routes
		}
		path := r[1]
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, ":") {
				path = strings.Replace(path, seg, "{"+seg[1:]+"}", 1)
			}
		}
		if strings.Contains(path, "*") {
			continue
		}
		registered = append(registered, r[0]+" "+path)
	}
	sort.Strings(documented)
	sort.Strings(registered)
	require.Equal(t, documented, registered)

	resp, err := http.Get(h.http.URL + "/openapi.yaml")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, string(apidoc.OpenAPI), readAll(t, resp))
}
