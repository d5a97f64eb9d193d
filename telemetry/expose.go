package telemetry

import (
	"bytes"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"queen/persistence"
)

// WritePrometheus writes the page of /metrics/prometheus: the Go runtime and the process, the
// families measured live, then those of the last periodic read. Nothing here queries the
// database, so a scrape costs the same with ten queues or ten thousand.
func (b *Broker) WritePrometheus(w io.Writer) {
	var live bytes.Buffer
	metrics.WriteProcessMetrics(&live)
	b.Set.WritePrometheus(&live)
	out := make([]byte, 0, live.Len()+live.Len()/4)
	out = WithHelp(out, live.Bytes(), help)
	_, _ = w.Write(out)
	if p := b.periodic.Load(); p != nil {
		_, _ = w.Write(*p)
	}
}

// WithHelp appends page to out with the help text of each family filled in from help: the
// metrics library writes "# HELP <family>" with no text.
func WithHelp(out, page []byte, help func(family string) string) []byte {
	const prefix = "# HELP "
	for len(page) > 0 {
		end := bytes.IndexByte(page, '\n') + 1
		if end == 0 {
			end = len(page)
		}
		line := page[:end]
		page = page[end:]
		family, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte(prefix))
		if !ok || bytes.IndexByte(family, ' ') >= 0 {
			out = append(out, line...)
			continue
		}
		out = append(out, prefix...)
		out = append(out, family...)
		if h := help(string(family)); h != "" {
			out = append(out, ' ')
			out = append(out, h...)
		}
		out = append(out, '\n')
	}
	return out
}

// LabelValue escapes a label value for the exposition format.
func LabelValue(s string) string {
	return labelEscaper.Replace(s)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// QueueLabels are the labels of a queue: the name its tenant knows, and
// a tenant label only for a tenant's queue. The stored name never reaches a label.
func QueueLabels(q persistence.QueueName) string { return nameLabels("queue", q) }

// nameLabels are the labels of a tenant's named thing (a queue, a stream query): the name under
// key, and the tenant unless it is the default one.
func nameLabels(key string, q persistence.QueueName) string {
	l := key + `="` + LabelValue(q.Name) + `"`
	if q.Tenant != "" {
		l += `,tenant="` + LabelValue(q.Tenant) + `"`
	}
	return l
}

// page builds families of the exposition format, each written whole with its help and type.
type page struct{ bytes.Buffer }

type sample struct {
	labels string // without braces; "" for none
	value  float64
}

// family writes one family; nothing when it has no sample.
func (p *page) family(name string, samples []sample) {
	if len(samples) == 0 {
		return
	}
	f := byName[name]
	p.WriteString("# HELP " + name + " " + f.Help + "\n# TYPE " + name + " " + f.Type + "\n")
	for _, s := range samples {
		p.WriteString(name)
		if s.labels != "" {
			p.WriteString("{" + s.labels + "}")
		}
		p.WriteByte(' ')
		p.WriteString(formatValue(s.value))
		p.WriteByte('\n')
	}
}

// formatValue writes whole numbers without an exponent, as the metrics library does.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
