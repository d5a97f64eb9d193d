// Package deploy holds the files operators drop into their monitoring: the Prometheus alerting
// rules (prometheus/alerts.yml, with promtool unit tests in alerts_test.yml) and the Grafana
// dashboard (grafana/queen.json). Its test checks them against the broker's catalogue of
// families, so renaming a family breaks the build here instead of silencing an alert.
package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"queen/telemetry"
)

// knownFamilies are the names an expression may select: the catalogue (with the series
// Prometheus makes of a histogram), the Go runtime and process families of the broker's page,
// and the up series Prometheus writes for every target.
func knownFamilies(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"up": true}
	for _, f := range telemetry.Families {
		known[f.Name] = true
		if f.Type == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				known[f.Name+suffix] = true
			}
		}
	}
	var page bytes.Buffer
	telemetry.New().WritePrometheus(&page)
	for line := range strings.Lines(page.String()) {
		if typed, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(typed, " ")
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				known[name] = true
			}
		}
	}
	if !known["process_cpu_seconds_total"] {
		t.Fatalf("the broker's page has no process families:\n%s", page.String())
	}
	return known
}

// notMetrics are the PromQL words that are neither followed by "(" nor metric names:
// aggregation operators (which may take "by" before their parentheses) and binary keywords.
var notMetrics = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
}

// labelLists are the keywords followed by a parenthesised list of label names.
var labelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names a PromQL expression selects: the identifiers outside
// strings, label matchers, ranges, label lists and Grafana variables that are not functions
// (followed by "(") nor keywords. A word it does not know is returned, so the test fails
// loudly rather than missing a name.
func metricNames(expr string) []string {
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipPast(expr, i, '}')
		case c == '[':
			i = skipPast(expr, i, ']')
		case c == '#':
			i = skipPast(expr, i, '\n')
		case c == '$': // a Grafana variable, $name or ${name}
			i++
			if i < len(expr) && expr[i] == '{' {
				i = skipPast(expr, i, '}')
			} else {
				i = wordEnd(expr, i)
			}
		case isDigit(c) || c == '.': // a number or a duration
			i = wordEnd(expr, i+1)
		case isWordStart(c):
			end := wordEnd(expr, i)
			word := expr[i:end]
			next := end
			for next < len(expr) && strings.IndexByte(" \t\n", expr[next]) >= 0 {
				next++
			}
			switch {
			case labelLists[word]:
				if next < len(expr) && expr[next] == '(' {
					end = skipPast(expr, next, ')')
				}
			case notMetrics[word] || next < len(expr) && expr[next] == '(':
			default:
				names = append(names, word)
			}
			i = end
		default:
			i++
		}
	}
	return names
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isWordStart(c byte) bool { return c == '_' || c == ':' || c|0x20 >= 'a' && c|0x20 <= 'z' }

// wordEnd is the end of the identifier (or number, or duration) that goes on at i.
func wordEnd(expr string, i int) int {
	for i < len(expr) && (isWordStart(expr[i]) || isDigit(expr[i]) || expr[i] == '.') {
		i++
	}
	return i
}

// skipString returns the index after the string that opens at i.
func skipString(expr string, i int) int {
	quote := expr[i]
	for i++; i < len(expr) && expr[i] != quote; i++ {
		if expr[i] == '\\' && quote != '`' {
			i++
		}
	}
	return i + 1
}

// skipPast returns the index after the first closing byte after i, outside strings.
func skipPast(expr string, i int, closing byte) int {
	for i++; i < len(expr) && expr[i] != closing; {
		if q := expr[i]; q == '"' || q == '\'' || q == '`' {
			i = skipString(expr, i)
		} else {
			i++
		}
	}
	return i + 1
}

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job="queen"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le, op) (rate(x_bucket{job="$job", op!="pop_wait"}[$__rate_interval])))`, []string{"x_bucket"}},
		{"a > 0\nand on (job) b == 1 # c\nor max(d) by (queue) unless e offset 5m", []string{"a", "b", "d", "e"}},
		{`topk(20, max by (queue) (x{q="}"}))`, []string{"x"}},
		{`rate(${metric}[1h30m]) > 1e3 or vector(0.5)`, nil},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// rule is one alerting rule of alerts.yml: its fields by key (labels and annotations included),
// the expression of a block scalar joined.
type rule struct {
	name   string
	fields map[string]string
}

// readRules reads the alerting rules of a rules file written in the layout of alerts.yml, one
// key a line and block scalars ("|") for long expressions. promtool checks the file itself; this
// only needs the names and fields.
func readRules(t *testing.T, path string) []rule {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	var rules []rule
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if name, ok := strings.CutPrefix(line, "- alert:"); ok {
			rules = append(rules, rule{name: strings.TrimSpace(name), fields: map[string]string{}})
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok || len(rules) == 0 || strings.HasPrefix(key, "#") {
			continue
		}
		value = strings.TrimSpace(value)
		if value == "|" {
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" ||
				len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
				i++
				block = append(block, strings.TrimSpace(lines[i]))
			}
			value = strings.TrimSpace(strings.Join(block, "\n"))
		}
		rules[len(rules)-1].fields[key] = strings.Trim(value, `"`)
	}
	return rules
}

// Every alert selects only families the broker exposes, says how long it waits, how bad it is
// and what to check, and has its runbook entry in docs/operations.md.
func TestAlertRules(t *testing.T) {
	known := knownFamilies(t)
	rules := readRules(t, "prometheus/alerts.yml")
	if len(rules) == 0 {
		t.Fatal("prometheus/alerts.yml has no alert")
	}
	operations, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		names := metricNames(r.fields["expr"])
		if len(names) == 0 {
			t.Errorf("%s: no metric in its expression %q", r.name, r.fields["expr"])
		}
		for _, name := range names {
			if !known[name] {
				t.Errorf("%s selects %s, which the broker does not expose", r.name, name)
			}
		}
		for _, key := range []string{"for", "severity", "summary", "description"} {
			if r.fields[key] == "" {
				t.Errorf("%s has no %s", r.name, key)
			}
		}
		if want := "docs/operations.md#" + strings.ToLower(r.name); r.fields["runbook"] != want {
			t.Errorf("%s: runbook %q, want %q", r.name, r.fields["runbook"], want)
		}
		if !bytes.Contains(operations, []byte("\n#### "+r.name+"\n")) {
			t.Errorf("docs/operations.md has no runbook entry #### %s", r.name)
		}
	}
}

type panel struct {
	Type       string
	Title      string
	Datasource *struct{ UID string }
	Targets    []struct{ Expr string }
	Panels     []panel // the panels of a collapsed row
}

// corePanels are the panel types Grafana ships: the dashboard needs no plugin.
var corePanels = []string{"row", "timeseries", "stat", "gauge", "bargauge", "table", "text"}

// labelValues is the form of the dashboard's variable queries.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// The dashboard parses, takes its data source from a variable, uses only core panels and
// selects only families the broker exposes.
func TestDashboard(t *testing.T) {
	known := knownFamilies(t)
	raw, err := os.ReadFile("grafana/queen.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []panel
		Templating struct {
			List []struct{ Name, Type, Query string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/queen.json does not parse: %v", err)
	}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range names {
			if !known[name] {
				t.Errorf("%s selects %s, which the broker does not expose", where, name)
			}
		}
	}
	hasDatasource := false
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasource = v.Name == "datasource" && v.Query == "prometheus"
		case "query":
			m := labelValues.FindStringSubmatch(v.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(series, label)", v.Name, v.Query)
				continue
			}
			check("variable "+v.Name, m[1])
		}
	}
	if !hasDatasource {
		t.Error("no Prometheus data source variable named datasource")
	}
	targets := 0
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			if !slices.Contains(corePanels, p.Type) {
				t.Errorf("panel %q is a %q, not a core panel", p.Title, p.Type)
			}
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not take its data source from the variable", p.Title)
			}
			for _, target := range p.Targets {
				targets++
				check("panel "+p.Title, target.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if targets == 0 {
		t.Fatal("the dashboard has no query")
	}
}
