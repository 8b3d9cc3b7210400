package api_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/msgpulse/msgpulse/api"
	"github.com/msgpulse/msgpulse/pkg/client"
)

type node = map[string]any

func load(t *testing.T) node {
	t.Helper()
	var doc node
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &doc))
	return doc
}

func obj(t *testing.T, v any, where string) node {
	t.Helper()
	m, ok := v.(node)
	require.Truef(t, ok, "%s: want a mapping, got %T", where, v)
	return m
}

var methods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// operations returns "METHOD /path" → operation.
func operations(t *testing.T, doc node) map[string]node {
	t.Helper()
	out := map[string]node{}
	for path, item := range obj(t, doc["paths"], "paths") {
		for method, op := range obj(t, item, path) {
			if slices.Contains(methods, method) {
				out[strings.ToUpper(method)+" "+path] = obj(t, op, method+" "+path)
			}
		}
	}
	return out
}

// The routes of the contract, no more, no fewer: the server's own test
// compares its router with this document, so the document must be exact.
func TestDocumentHasExactlyTheContractRoutes(t *testing.T) {
	doc := load(t)
	require.Regexp(t, `^3\.[01]\.\d+$`, doc["openapi"])
	info := obj(t, doc["info"], "info")
	require.NotEmpty(t, info["title"])
	require.NotEmpty(t, info["version"])

	want := []string{
		"POST /api/verification-codes",
		"POST /api/verification-codes/verify",
		"POST /api/messages/send",
		"POST /api/messages/batch",
		"GET /api/batches/{batchId}",
		"GET /api/messages/{taskId}",
		"GET /api/messages",
		"GET /api/rate-limits",
		"POST /api/rate-limits",
		"GET /api/rate-limits/{id}",
		"PUT /api/rate-limits/{id}",
		"DELETE /api/rate-limits/{id}",
		"GET /api/queues/stats",
		"GET /api/dlq/stats",
		"GET /api/fraud/blocks",
		"DELETE /api/fraud/blocks/{tenant}/{prefix}",
		"GET /api/suppressions",
		"POST /api/suppressions",
		"DELETE /api/suppressions/{channel}/{recipient}",
		"GET /healthz",
		"GET /readyz",
		"GET /metrics",
		"GET /openapi.yaml",
	}
	got := slices.Sorted(maps.Keys(operations(t, doc)))
	slices.Sort(want)
	require.Equal(t, want, got)
}

func TestEveryOperationIsComplete(t *testing.T) {
	doc := load(t)
	schemes := obj(t, obj(t, doc["components"], "components")["securitySchemes"], "securitySchemes")
	key := obj(t, schemes["ApiKey"], "ApiKey")
	require.Equal(t, "apiKey", key["type"])
	require.Equal(t, "header", key["in"])
	require.Equal(t, "X-API-Key", key["name"])
	require.Equal(t, []any{node{"ApiKey": []any{}}}, doc["security"], "the API key is required by default")

	ids := map[string]string{}
	for name, op := range operations(t, doc) {
		t.Run(name, func(t *testing.T) {
			id, _ := op["operationId"].(string)
			require.NotEmpty(t, id)
			require.NotContains(t, ids, id, "operationId %q is also used by %s", id, ids[id])
			ids[id] = name
			require.NotEmpty(t, op["summary"])

			responses := obj(t, op["responses"], "responses")
			require.NotEmpty(t, responses)
			for code, r := range responses {
				require.Regexp(t, `^[1-5][0-9][0-9]$`, code)
				resp := obj(t, resolve(t, doc, r), code)
				require.NotEmpty(t, resp["description"], code)
				if code == "429" {
					headers := obj(t, resp["headers"], "429 headers")
					require.Contains(t, headers, "Retry-After")
				}
				if code[0] == '2' {
					continue
				}
				if strings.HasPrefix(name, "GET /readyz") {
					continue // 503 carries the readiness report
				}
				content := obj(t, resp["content"], code+" content")
				require.Contains(t, content, "application/json", "errors are envelopes")
			}

			_, overridden := op["security"]
			path := strings.SplitN(name, " ", 2)[1]
			if strings.HasPrefix(path, "/api/") {
				require.False(t, overridden, "/api routes keep the API key requirement")
				require.Contains(t, responses, "401")
				require.Contains(t, responses, "503")
			} else {
				require.Equal(t, []any{}, op["security"], "%s needs no key", path)
			}
			if op["requestBody"] != nil {
				require.Contains(t, responses, "400")
				require.Contains(t, responses, "413")
				require.Contains(t, responses, "415")
			}
		})
	}
}

// Every {param} of a path is declared as a path parameter, and nothing else is.
func TestPathParametersAreDeclared(t *testing.T) {
	doc := load(t)
	braces := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range obj(t, doc["paths"], "paths") {
		it := obj(t, item, path)
		var inPath []string
		for _, m := range braces.FindAllStringSubmatch(path, -1) {
			inPath = append(inPath, m[1])
		}
		sort.Strings(inPath)
		for method, op := range it {
			if !slices.Contains(methods, method) {
				continue
			}
			var declared []string
			params, _ := it["parameters"].([]any)
			opParams, _ := obj(t, op, method)["parameters"].([]any)
			for _, p := range append(slices.Clone(params), opParams...) {
				pm := obj(t, resolve(t, doc, p), "parameter")
				if pm["in"] == "path" {
					require.Equal(t, true, pm["required"], "%s %s: path parameters are required", method, path)
					declared = append(declared, pm["name"].(string))
				}
			}
			sort.Strings(declared)
			require.Equal(t, inPath, declared, "%s %s", method, path)
		}
	}
}

// Every $ref resolves, and every component is used: an unused schema is a
// sign of a route that lost its documentation.
func TestReferencesResolveAndComponentsAreUsed(t *testing.T) {
	doc := load(t)
	used := map[string]bool{}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case node:
			if ref, ok := v["$ref"]; ok {
				s, isString := ref.(string)
				require.True(t, isString, "%s: $ref must be a string", at)
				_, err := lookup(doc, s)
				require.NoError(t, err, "%s", at)
				used[s] = true
			}
			for k, c := range v {
				walk(c, at+"/"+k)
			}
		case []any:
			for i, c := range v {
				walk(c, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	require.NotEmpty(t, used)

	for kind, group := range obj(t, doc["components"], "components") {
		if kind == "securitySchemes" {
			continue // used by name in security requirements
		}
		for name := range obj(t, group, kind) {
			ref := "#/components/" + kind + "/" + name
			require.True(t, used[ref], "%s is never referenced", ref)
		}
	}
}

func TestLookupRejectsBrokenReferences(t *testing.T) {
	doc := node{"components": node{"schemas": node{"a/b": node{"type": "string"}, "List": []any{"x"}}}}
	for _, tc := range []struct {
		ref     string
		wantErr bool
	}{
		{"#/components/schemas/a~1b", false},
		{"#/components/schemas/List/0", false},
		{"#/components/schemas/Missing", true},
		{"#/components/schemas/List/1", true},
		{"other.yaml#/x", true},
		{"#/components/schemas/a~1b/type/deeper", true},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			_, err := lookup(doc, tc.ref)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// lookup resolves a local JSON pointer reference.
func lookup(doc node, ref string) (any, error) {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%s: only local references are used", ref)
	}
	var cur any = doc
	for _, tok := range strings.Split(ptr, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case node:
			next, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("%s: no %q", ref, tok)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%s: no index %q", ref, tok)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%s: cannot descend into %T at %q", ref, cur, tok)
		}
	}
	return cur, nil
}

func resolve(t *testing.T, doc node, v any) any {
	t.Helper()
	for range 16 {
		m, ok := v.(node)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		next, err := lookup(doc, ref)
		require.NoError(t, err)
		v = next
	}
	t.Fatalf("reference chain too long")
	return nil
}

// Every example in the document matches its schema: an example is what
// readers copy, so a wrong one is a wrong contract.
func TestExamplesMatchTheirSchemas(t *testing.T) {
	doc := load(t)
	count := 0
	check := func(at string, schema, example any) {
		count++
		require.NoError(t, validate(doc, schema, example, at), "example at %s", at)
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case node:
			schema, hasSchema := v["schema"]
			if ex, ok := v["example"]; ok {
				if hasSchema {
					check(at, schema, ex) // media type, parameter or header
				} else if _, isSchema := v["type"]; isSchema || v["allOf"] != nil {
					check(at, v, ex) // a schema's own example
				}
			}
			if exs, ok := v["examples"].(node); ok && hasSchema {
				for name, ex := range exs {
					check(at+"/examples/"+name, schema, obj(t, ex, name)["value"])
				}
			}
			for k, c := range v {
				walk(c, at+"/"+k)
			}
		case []any:
			for i, c := range v {
				walk(c, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	require.Greater(t, count, 40, "the walk finds the examples")
}

// The validator must catch what it is there to catch.
func TestValidatorRejects(t *testing.T) {
	doc := load(t)
	ref := func(name string) node { return node{"$ref": "#/components/schemas/" + name} }
	for _, tc := range []struct {
		name    string
		schema  any
		example any
	}{
		{"missing required", ref("VerifyResult"), node{"valid": true}},
		{"wrong type", ref("VerifyResult"), node{"valid": "yes", "attemptsLeft": 1}},
		{"fraction for integer", ref("VerifyResult"), node{"valid": true, "attemptsLeft": 1.5}},
		{"enum", ref("Channel"), "fax"},
		{"unknown property", ref("VerifyRequest"), node{"channel": "sms", "recipient": "+8613900001234", "purpose": "login", "code": "1234", "x": 1}},
		{"pattern", ref("VerifyRequest"), node{"channel": "sms", "recipient": "+8613900001234", "purpose": "login", "code": "12ab"}},
		{"not a timestamp", ref("Timestamp"), "yesterday"},
		{"null where not nullable", ref("Message"), nil},
		{"data on an error", ref("Error"), node{"code": 400, "msg": "x", "data": node{}}},
		{"envelope data", ref("SendResultEnvelope"), node{"code": 202, "msg": "x", "data": node{"taskId": "t"}}},
		{"maximum", ref("SendRequest"), node{"messageType": "SMS", "templateCode": "x", "recipient": "+8613900001234", "priority": 10}},
		{"oneOf matches none", node{"oneOf": []any{ref("VerifyResultEnvelope"), ref("Error")}}, node{"code": 429, "msg": "x", "data": "no"}},
		{"array items", ref("RateLimitListEnvelope"), node{"code": 200, "msg": "ok", "data": []any{node{"id": "x"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, validate(doc, tc.schema, tc.example, tc.name))
		})
	}
}

// validate checks v against the subset of OpenAPI 3.0 schema keywords the
// document uses; an unknown keyword fails, so that the subset cannot
// silently fall behind the document.
func validate(doc node, schema, v any, at string) error {
	s, ok := schema.(node)
	if !ok {
		return fmt.Errorf("%s: schema is %T", at, schema)
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := lookup(doc, ref)
		if err != nil {
			return err
		}
		return validate(doc, target, v, at)
	}
	for k := range s {
		switch k {
		case "type", "nullable", "enum", "required", "properties", "additionalProperties", "items", "allOf", "oneOf",
			"minimum", "maximum", "minLength", "maxLength", "pattern", "format", "maxProperties", "minItems", "maxItems",
			"description", "example":
		default:
			return fmt.Errorf("%s: schema keyword %q is not supported by this check", at, k)
		}
	}
	for i, sub := range listOf(s["allOf"]) {
		if err := validate(doc, sub, v, fmt.Sprintf("%s(allOf %d)", at, i)); err != nil {
			return err
		}
	}
	if alts := listOf(s["oneOf"]); len(alts) > 0 {
		n := 0
		for _, sub := range alts {
			if validate(doc, sub, v, at) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: matches %d of oneOf's %d schemas, want exactly 1", at, n, len(alts))
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
	}
	if v == nil {
		if s["nullable"] == true || (s["type"] == nil && s["allOf"] == nil && s["oneOf"] == nil) {
			return nil
		}
		return fmt.Errorf("%s: null is not allowed", at)
	}
	switch s["type"] {
	case nil:
	case "object":
		m, ok := v.(node)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", at, v)
		}
		for _, r := range listOf(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: missing required %q", at, r)
			}
		}
		if max, ok := s["maxProperties"].(int); ok && len(m) > max {
			return fmt.Errorf("%s: more than %d properties", at, max)
		}
		props, _ := s["properties"].(node)
		for k, pv := range m {
			if ps, ok := props[k]; ok {
				if err := validate(doc, ps, pv, at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: unknown property %q", at, k)
				}
			case node:
				if err := validate(doc, ap, pv, at+"."+k); err != nil {
					return err
				}
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %T", at, v)
		}
		if n, ok := s["minItems"].(int); ok && len(a) < n {
			return fmt.Errorf("%s: fewer than %d items", at, n)
		}
		if n, ok := s["maxItems"].(int); ok && len(a) > n {
			return fmt.Errorf("%s: more than %d items", at, n)
		}
		for i, item := range a {
			if err := validate(doc, s["items"], item, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T (%v)", at, v, v)
		}
		if n, ok := s["minLength"].(int); ok && len([]rune(str)) < n {
			return fmt.Errorf("%s: shorter than %d", at, n)
		}
		if n, ok := s["maxLength"].(int); ok && len([]rune(str)) > n {
			return fmt.Errorf("%s: longer than %d", at, n)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", at, str, p)
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return fmt.Errorf("%s: %q is not RFC 3339", at, str)
			}
		}
	case "integer", "number":
		var f float64
		switch n := v.(type) {
		case int:
			f = float64(n)
		case float64:
			f = n
		default:
			return fmt.Errorf("%s: want a number, got %T", at, v)
		}
		if s["type"] == "integer" && f != float64(int64(f)) {
			return fmt.Errorf("%s: %v is not an integer", at, v)
		}
		if m, ok := number(s["minimum"]); ok && f < m {
			return fmt.Errorf("%s: %v below %v", at, v, m)
		}
		if m, ok := number(s["maximum"]); ok && f > m {
			return fmt.Errorf("%s: %v above %v", at, v, m)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", at, v)
		}
	default:
		return fmt.Errorf("%s: unknown type %v", at, s["type"])
	}
	return nil
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// The client (pkg/client) and the document name the same fields: a field
// renamed on one side only would otherwise surface against a live server.
func TestClientTypesMatchSchemas(t *testing.T) {
	doc := load(t)
	schemas := obj(t, obj(t, doc["components"], "components")["schemas"], "schemas")
	for _, tc := range []struct {
		schema  string
		typ     any
		request bool // its required fields must always be sent
	}{
		{"VerificationCodeRequest", client.VerificationCodeRequest{}, true},
		{"VerificationCode", client.VerificationCode{}, false},
		{"VerifyRequest", client.VerifyRequest{}, true},
		{"VerifyResult", client.VerifyResult{}, false},
		{"SendRequest", client.SendRequest{}, true},
		{"SendResult", client.SendResult{}, false},
		{"BatchRequest", client.BatchRequest{}, true},
		{"BatchResult", client.BatchResult{}, false},
		{"Batch", client.Batch{}, false},
		{"Message", client.Message{}, false},
		{"RateLimitInput", client.RateLimit{}, true},
		{"RateLimit", client.RateLimit{}, false},
		{"QueueStats", client.QueueStats{}, false},
		{"QueueStat", client.QueueStat{}, false},
		{"WeComAccountState", client.WeComAccountState{}, false},
		{"WeComMedia", client.WeComMedia{}, true},
		{"DLQStats", client.DLQStats{}, false},
		{"DLQQueueStat", client.DLQQueueStat{}, false},
		{"FraudBlock", client.FraudBlock{}, false},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			s := obj(t, schemas[tc.schema], tc.schema)
			props := obj(t, s["properties"], tc.schema+" properties")
			fields := jsonFields(reflect.TypeOf(tc.typ))
			require.ElementsMatch(t, slices.Collect(maps.Keys(props)), slices.Collect(maps.Keys(fields)))
			for _, r := range listOf(s["required"]) {
				if tc.request {
					require.False(t, fields[r.(string)], "%s is required: it must not be omitempty", r)
				}
			}
		})
	}
}

// jsonFields maps a struct's JSON names to whether they are omitempty.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = strings.Contains(opts, "omitempty")
	}
	return out
}

// Code generators and gateways load the document with a strict validator;
// kin-openapi with examples validation is one of the strictest, so a document
// it accepts is accepted by the others we know of. Examples are part of the
// contract: an example that its own schema rejects teaches clients wrong.
func TestDocumentPassesStrictValidation(t *testing.T) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(api.OpenAPI)
	require.NoError(t, err, "load")
	err = doc.Validate(context.Background(),
		openapi3.EnableExamplesValidation(),
		openapi3.EnableSchemaDefaultsValidation(),
		openapi3.EnableSchemaPatternValidation(),
		openapi3.EnableSchemaFormatValidation(),
	)
	require.NoError(t, err)
}
