package sim

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// Timeline follows one bucket (the scenario's focus key) through a run,
// one step at a time.
type Timeline struct {
	// Title names the run.
	Title string
	// Key is the bucket followed.
	Key string
	// Policy is the scenario's main policy.
	Policy algo.Policy
	// Step is the length of each entry: one second.
	Step time.Duration
	// Admitted counts the requests admitted at Key in each step.
	Admitted []int64
	// Denied counts the requests denied at Key in each step.
	Denied []int64
	// Tokens is the whole tokens left after the last request at Key in
	// each step (as the instance that served it saw them), or -1 when the
	// key had no request in that step.
	Tokens []int64
}

// SVG geometry: a plot of plotW×plotH pixels inside margins.
const (
	svgW, svgH           = 820, 320
	left, top            = 60, 40
	plotW, plotH         = 700, 220
	maxColumns           = 700
	admitColor, denColor = "#2e7d32", "#c62828"
	tokenColor           = "#1565c0"
)

// WriteSVG draws tl as a self-contained SVG chart: stacked bars of admitted
// (green) and denied (red) requests per second on the left axis, and, as
// blue dots on the right axis (0 to the policy's capacity), the tokens left
// after the last request of each second that had one. Runs longer than 700 s are drawn in bins of several
// seconds, each bar showing the mean per second over its bin. The output
// depends only on tl, so it is as reproducible as the run.
func WriteSVG(w io.Writer, tl *Timeline) error {
	n := len(tl.Admitted)
	if n == 0 || len(tl.Denied) != n || len(tl.Tokens) != n {
		return fmt.Errorf("%w: empty or ragged timeline", ErrInvalidConfig)
	}
	bin := (n + maxColumns - 1) / maxColumns
	cols := (n + bin - 1) / bin
	adm, den, tok := make([]float64, cols), make([]float64, cols), make([]int64, cols)
	top1 := 1.0
	for c := range cols {
		tok[c] = -1
		for s := c * bin; s < min(n, (c+1)*bin); s++ {
			adm[c] += float64(tl.Admitted[s]) / float64(bin)
			den[c] += float64(tl.Denied[s]) / float64(bin)
			if tl.Tokens[s] >= 0 {
				tok[c] = tl.Tokens[s]
			}
		}
		top1 = max(top1, adm[c]+den[c])
	}
	yMax := niceCeil(top1)
	capacity := max(tl.Policy.Capacity(), 1)
	colW := float64(plotW) / float64(cols)
	y := func(v float64) float64 { return top + plotH - v/yMax*plotH }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, esc(tl.Title))
	for c := range cols {
		x := left + float64(c)*colW
		if adm[c] > 0 {
			fmt.Fprintf(b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n", x, y(adm[c]), colW, plotH-(y(adm[c])-top), admitColor)
		}
		if den[c] > 0 {
			fmt.Fprintf(b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n", x, y(adm[c]+den[c]), colW, y(adm[c])-y(adm[c]+den[c]), denColor)
		}
	}
	// Tokens are dots where the key was seen, not a line: between two
	// requests the bucket refills, and a line would invent its level.
	for c, t := range tok {
		if t >= 0 {
			fmt.Fprintf(b, `<circle cx="%.2f" cy="%.2f" r="1.8" fill="%s"/>`+"\n",
				left+(float64(c)+0.5)*colW, top+plotH-float64(t)/float64(capacity)*plotH, tokenColor)
		}
	}
	// Axes, ticks and labels.
	fmt.Fprintf(b, `<path d="M%d %d V%d H%d V%d" fill="none" stroke="black"/>`+"\n", left, top, top+plotH, left+plotW, top)
	for i := range 5 {
		v := yMax * float64(i) / 4
		yy := y(v)
		fmt.Fprintf(b, `<text x="%d" y="%.2f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, trim(v))
		fmt.Fprintf(b, `<text x="%d" y="%.2f">%d</text>`+"\n", left+plotW+6, yy+4, capacity*int64(i)/4)
	}
	total := time.Duration(n) * tl.Step
	for i := range 6 {
		at := total * time.Duration(i) / 5
		fmt.Fprintf(b, `<text x="%.2f" y="%d" text-anchor="middle">%v</text>`+"\n", left+float64(plotW)*float64(i)/5, top+plotH+16, at.Round(time.Second))
	}
	unit := "requests per second"
	if bin > 1 {
		unit = fmt.Sprintf("requests per second (mean over %d s)", bin)
	}
	var nAdm, nDen int64
	for s := range n {
		nAdm, nDen = nAdm+tl.Admitted[s], nDen+tl.Denied[s]
	}
	fmt.Fprintf(b, `<text x="%d" y="%d">%s at %s: <tspan fill="%s">%d admitted</tspan>, <tspan fill="%s">%d denied</tspan>; <tspan fill="%s">• tokens left</tspan> (right axis)</text>`+"\n",
		left, svgH-12, unit, esc(tl.Key), admitColor, nAdm, denColor, nDen, tokenColor)
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// trim formats a tick value without needless decimals.
func trim(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
