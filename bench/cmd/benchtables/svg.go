package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// palette colours the lines, ratebucket first.
var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// writeSVG draws median throughput against goroutines on distinct keys, one
// line per implementation, with ratebucket's redis-benchmark ceilings as
// dashed lines. The x axis is logarithmic.
func (s *samples) writeSVG(w io.Writer) error {
	prefix := "Redis/keys=distinct/conc="
	groups := s.withPrefix(prefix)
	if len(groups) == 0 {
		return fmt.Errorf("benchtables: no Redis distinct-key rows to chart")
	}
	var concs []float64
	for _, g := range groups {
		c, err := strconv.Atoi(strings.TrimPrefix(g, prefix))
		if err != nil {
			return err
		}
		concs = append(concs, float64(c))
	}
	type ceiling struct {
		label string
		v     float64
	}
	var ceilings []ceiling
	top := 0.0
	for _, g := range groups {
		for _, impl := range s.impls[g] {
			top = max(top, s.median(g, impl, "checks/s"))
		}
	}
	for _, g := range s.withPrefix("RedisCeiling/") {
		if v := s.median(g, ours, "checks/s"); !math.IsNaN(v) && strings.HasPrefix(g, "RedisCeiling/c=64/") {
			ceilings = append(ceilings, ceiling{"ceiling " + strings.ReplaceAll(strings.TrimPrefix(g, "RedisCeiling/"), "/", " "), v})
			top = max(top, v)
		}
	}
	const width, height, left, right, topM, bottom = 720, 420, 70, 190, 30, 50
	pw, ph := float64(width-left-right), float64(height-topM-bottom)
	top *= 1.1
	lo, hi := math.Log(concs[0]), math.Log(concs[len(concs)-1])
	x := func(c float64) float64 {
		if hi == lo {
			return left + pw/2
		}
		return left + pw*(math.Log(c)-lo)/(hi-lo)
	}
	y := func(v float64) float64 { return topM + ph*(1-v/top) }

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(w, `<text x="%d" y="18" font-size="14">Redis checks/s, distinct keys, median of runs (dashed: redis-benchmark, our script)</text>`+"\n", left)
	for i := 0; i <= 5; i++ {
		v := top * float64(i) / 5
		fmt.Fprintf(w, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, left+pw, y(v), y(v), left-6, y(v)+4, thousands(v))
	}
	for _, c := range concs {
		fmt.Fprintf(w, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`+"\n", x(c), topM+ph+18, c)
	}
	fmt.Fprintf(w, `<text x="%.0f" y="%d" text-anchor="middle">goroutines</text>`+"\n", left+pw/2, height-10)
	for i, cl := range ceilings {
		fmt.Fprintf(w, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="%d 4"/>`+"\n",
			left, left+pw, y(cl.v), y(cl.v), 6+4*i)
		fmt.Fprintf(w, `<text x="%.0f" y="%.1f" fill="#555">%s</text>`+"\n", left+pw+6, y(cl.v)+4, cl.label)
	}
	for i, impl := range s.impls[groups[0]] {
		colour := palette[i%len(palette)]
		var pts []string
		for j, g := range groups {
			if v := s.median(g, impl, "checks/s"); !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(concs[j]), y(v)))
			}
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		ly := topM + 20*float64(i+len(ceilings)) + 40
		fmt.Fprintf(w, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="2"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			left+pw+6, left+pw+26, ly, ly, colour, left+pw+30, ly+4, impl)
	}
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}
