package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeScaleCharts draws one SVG per dimension of the scale results: msg/s of each operation
// against the dimension's value, the x axis logarithmic where the values span two decades or
// more. It returns the files written.
func writeScaleCharts(dir string, results []*Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create the chart directory: %w", err)
	}
	var files []string
	for _, d := range scaleDims {
		series := map[string]plotter.XYs{}
		var values []int
		for _, r := range results {
			if s := r.Scale; s != nil && s.Dimension == d.name && r.Verified {
				series[s.Operation] = append(series[s.Operation], plotter.XY{X: float64(s.Value), Y: r.MsgPerSec})
				values = append(values, s.Value)
			}
		}
		if len(values) == 0 {
			continue
		}
		path := filepath.Join(dir, "scale-"+d.name+".svg")
		if err := drawScaleChart(path, d.name, series, slices.Min(values), slices.Max(values)); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func drawScaleChart(path, dim string, series map[string]plotter.XYs, lo, hi int) error {
	p := plot.New()
	p.Title.Text = "msg/s as " + dim + " grow (the other dimensions at their smallest)"
	p.X.Label.Text = dim
	p.Y.Label.Text = "msg/s"
	p.Y.Min = 0
	if lo > 0 && hi >= 100*lo {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	var lines []any
	for _, op := range scaleOps {
		if xys, ok := series[op]; ok {
			slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
			lines = append(lines, op, xys)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("cannot draw the %s chart: %w", dim, err)
	}
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}
