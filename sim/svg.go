package sim

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The chart's palette is Okabe and Ito's, which readers with any common
// colour-vision deficiency tell apart; every mark also differs in shape
// or pattern, so the chart reads in grey too.
const (
	admitColor = "#009E73" // bluish green: admitted, drawn as ▲
	denyColor  = "#D55E00" // vermillion: denied, drawn as ✕
	levelColor = "#0072B2" // blue: the room left, a line
	worstColor = "#E69F00" // orange: the worst interval, hatched
	gridColor  = "#999999" // window boundaries, dashed
)

// SVG geometry: panels plotW wide, starting at left.
const (
	svgW          = 820
	left, plotW   = 60, 700
	panelH, strip = 150, 34 // a panel's level plot, and its request strip below
	maxMarks      = 400     // more requests than this in a panel are drawn binned per pixel
	maxGrid       = 80      // more window boundaries than this in a panel are not drawn
)

// WriteSVG draws tl as a self-contained SVG chart on w. A panel covers the
// whole run: the room left in the bucket as a continuous line (the
// token bucket's sawtooth: a drop at each admitted request, a straight
// refill, flat at capacity; a window's count resetting at each dashed
// boundary), every request as a mark in a strip below it (admitted ▲ above,
// denied ✕ below; binned per pixel when there are too many to tell
// apart), and, when the never-exceed law is broken, the worst interval
// hatched. When the run is about an instant ([Timeline.Instant], as the
// boundary spike is), a second panel zooms on [Timeline.Zoom], the worst
// interval (or the tightest, when the law holds), where every request has
// its own mark. A caption
// gives the totals and the law's numbers as text. The output depends only
// on tl, so it is as reproducible as the run.
func (tl *Timeline) WriteSVG(w io.Writer) error {
	if tl == nil || tl.Duration <= 0 || tl.Capacity <= 0 {
		return fmt.Errorf("%w: empty timeline", ErrInvalidConfig)
	}
	zoom := tl.Instant && tl.Zoom.To > tl.Zoom.From
	h := 40 + panelH + strip + 40
	if zoom {
		h += panelH + strip + 60
	}
	h += 56
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" role="img" aria-label="%s">`+"\n",
		svgW, h, svgW, h, esc(tl.summary()))
	fmt.Fprintf(b, `<title>%s</title>`+"\n", esc(tl.summary()))
	fmt.Fprintf(b, `<defs><pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="%s" fill-opacity="0.18"/><line x1="0" y1="0" x2="0" y2="8" stroke="%s" stroke-width="2" stroke-opacity="0.6"/></pattern></defs>`+"\n", worstColor, worstColor)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, h)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, esc(tl.Title))
	y := 40
	panel(b, tl, 0, tl.Duration, y, fmt.Sprintf("the whole run at %s", tl.Key))
	y += panelH + strip + 40
	if zoom {
		y += 20
		panel(b, tl, tl.Zoom.From, tl.Zoom.To, y, fmt.Sprintf("zoomed on %v to %v", ms3(tl.Zoom.From), ms3(tl.Zoom.To)))
		y += panelH + strip + 40
	}
	fmt.Fprintf(b, `<text x="%d" y="%d"><tspan fill="%s">▲ %d admitted</tspan>, <tspan fill="%s">✕ %d denied</tspan>; <tspan fill="%s">— room left in the bucket</tspan> (tokens a request could take)</text>`+"\n",
		left, y, admitColor, tl.Admitted, denyColor, tl.Denied, levelColor)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", left, y+18, esc(tl.lawText()))
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// summary is the chart's text alternative.
func (tl *Timeline) summary() string {
	return fmt.Sprintf("%s. %d admitted, %d denied. %s", tl.Title, tl.Admitted, tl.Denied, tl.lawText())
}

// lawText states the law's outcome at the key in one sentence.
func (tl *Timeline) lawText() string {
	l := tl.Law
	if l.Admitted == 0 {
		return "Nothing admitted: the never-exceed law holds trivially."
	}
	span := ms3(l.To - l.From)
	if l.Holds {
		return fmt.Sprintf("Never-exceed law holds: at most capacity + rate·t in every interval; tightest, %d admitted in %v against %d.", l.Admitted, span, l.Bound)
	}
	return fmt.Sprintf("Never-exceed law BROKEN (hatched): %d admitted in %v, from %v, against capacity + rate·t = %d (%s).",
		l.Admitted, span, ms3(l.From), l.Bound, ratio(l.Admitted, l.Bound))
}

// panel draws [from, to) of tl with its top at y.
func panel(b io.Writer, tl *Timeline, from, to time.Duration, y int, label string) {
	span := float64(to - from)
	x := func(at time.Duration) float64 { return left + float64(at-from)/span*plotW }
	capacity := float64(tl.Capacity)
	ly := func(v float64) float64 { return float64(y) + panelH - v/capacity*panelH }
	clip := fmt.Sprintf("clip%d", y)
	fmt.Fprintf(b, `<clipPath id="%s"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>`+"\n", clip, left, y-2, plotW, panelH+strip+4)
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#444">%s</text>`+"\n", left, y-6, esc(label))
	fmt.Fprintf(b, `<g clip-path="url(#%s)">`+"\n", clip)
	// The worst interval, when the law is broken: at least 3 px wide.
	if l := tl.Law; !l.Holds && l.To >= from && l.From <= to {
		x0, x1 := x(l.From), x(l.To)
		if x1-x0 < 3 {
			x0, x1 = (x0+x1)/2-1.5, (x0+x1)/2+1.5
		}
		fmt.Fprintf(b, `<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="url(#hatch)" stroke="%s"><title>%s</title></rect>`+"\n",
			x0, y, x1-x0, panelH+strip, worstColor, esc(tl.lawText()))
		if x1-x0 >= 150 {
			fmt.Fprintf(b, `<text x="%.2f" y="%d" text-anchor="middle" font-weight="bold" fill="black" stroke="white" stroke-width="3" paint-order="stroke">%d admitted in %v: bound %d</text>`+"\n",
				(x0+x1)/2, y+panelH/2, l.Admitted, ms3(l.To-l.From), l.Bound)
		}
	}
	// Window boundaries, dashed, with the admitted count of each window
	// that has one. A store per instance cuts its windows on its own
	// clock: each distinct start is drawn.
	if tl.Window > 0 && (to-from)/tl.Window <= maxGrid {
		for _, start := range tl.windowStarts() {
			first := start + max((from-start+tl.Window-1)/tl.Window, 0)*tl.Window
			for at := first; at <= to; at += tl.Window {
				fmt.Fprintf(b, `<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x(at), y, x(at), y+panelH+strip, gridColor)
			}
		}
		for _, win := range tl.Windows {
			wx := x(min(win.To, to)) - x(max(win.From, from))
			if win.To <= from || win.From >= to || wx < 30 || win.Admitted == 0 {
				continue
			}
			text := fmt.Sprint(win.Admitted)
			if wx >= 100 {
				text += " in window"
			}
			fmt.Fprintf(b, `<text x="%.2f" y="%d" fill="#555" text-anchor="middle" font-size="11">%s</text>`+"\n",
				(x(max(win.From, from))+x(min(win.To, to)))/2, y+12, text)
		}
	}
	// The room left, one line per store (dashed differently per instance).
	dashes := []string{"", ` stroke-dasharray="6 3"`, ` stroke-dasharray="2 2"`, ` stroke-dasharray="8 2 2 2"`}
	for i, lv := range tl.Levels {
		var d strings.Builder
		for j, p := range visible(lv.Points, from, to) {
			op := "L"
			if j == 0 {
				op = "M"
			}
			fmt.Fprintf(&d, "%s%.2f %.2f", op, x(p.At), ly(p.Tokens))
		}
		if d.Len() > 0 {
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"%s/>`+"\n", d.String(), levelColor, dashes[i%len(dashes)])
		}
	}
	marks(b, tl, from, to, x, y+panelH)
	fmt.Fprintln(b, "</g>")
	// Axes: room on the left, time below the strip.
	fmt.Fprintf(b, `<path d="M%d %d V%d H%d" fill="none" stroke="black"/>`+"\n", left, y, y+panelH+strip, left+plotW)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ccc"/>`+"\n", left, y+panelH, left+plotW, y+panelH)
	for i := range 3 {
		v := tl.Capacity * int64(i) / 2
		fmt.Fprintf(b, `<text x="%d" y="%.2f" text-anchor="end">%d</text>`+"\n", left-6, ly(float64(v))+4, v)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-size="11" fill="%s">▲</text><text x="%d" y="%d" text-anchor="end" font-size="11" fill="%s">✕</text>`+"\n",
		left-6, y+panelH+13, admitColor, left-6, y+panelH+29, denyColor)
	step := tickStep(to - from)
	for at := (from + step - 1) / step * step; at <= to; at += step {
		fmt.Fprintf(b, `<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="black"/><text x="%.2f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x(at), y+panelH+strip, x(at), y+panelH+strip+4, x(at), y+panelH+strip+17, fmtAt(at, step))
	}
}

// visible returns the points of a level that draw [from, to]: those inside
// and one on either side, so the line runs to the panel's edges.
func visible(pts []Point, from, to time.Duration) []Point {
	lo, hi := 0, len(pts)
	for lo+1 < len(pts) && pts[lo+1].At <= from {
		lo++
	}
	for hi-1 > lo && pts[hi-2].At >= to {
		hi--
	}
	return pts[lo:hi]
}

// marks draws the requests of [from, to) in the strip at y: admitted ▲ in
// its upper row, denied ✕ in its lower, one mark each with the answer as
// its title; or, when there are more than maxMarks, a tick per pixel
// column with any, as tall as its share of the busiest column.
func marks(b io.Writer, tl *Timeline, from, to time.Duration, x func(time.Duration) float64, y int) {
	var in []Request
	for _, q := range tl.Requests {
		if q.At >= from && q.At < to {
			in = append(in, q)
		}
	}
	if len(in) <= maxMarks {
		for _, q := range in {
			if q.Allowed {
				fmt.Fprintf(b, `<path d="M%.2f %d l4 7 h-8z" fill="%s"><title>%s</title></path>`+"\n", x(q.At), y+3, admitColor, esc(tl.describe(q)))
			} else {
				fmt.Fprintf(b, `<path d="M%.2f %d l6 6 m0 -6 l-6 6" stroke="%s" stroke-width="1.5"><title>%s</title></path>`+"\n", x(q.At)-3, y+21, denyColor, esc(tl.describe(q)))
			}
		}
		return
	}
	var adm, den [plotW]int
	top := 1
	for _, q := range in {
		c := min(int(x(q.At))-left, plotW-1)
		if q.Allowed {
			adm[c]++
			top = max(top, adm[c])
		} else {
			den[c]++
			top = max(top, den[c])
		}
	}
	tick := func(n, c, base int, color string) {
		if n > 0 {
			h := max(2, int(math.Round(14*float64(n)/float64(top))))
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="1" height="%d" fill="%s"/>`+"\n", left+c, base+16-h, h, color)
		}
	}
	for c := range plotW {
		tick(adm[c], c, y, admitColor)
		tick(den[c], c, y+17, denyColor)
	}
}

// describe is a request's answer in words, for a mark's title.
func (tl *Timeline) describe(q Request) string {
	who := "?"
	if q.Client >= 0 && q.Client < len(tl.Clients) {
		who = tl.Clients[q.Client]
	}
	s := fmt.Sprintf("%v: %s via instance %d, cost %d: ", q.At, who, q.Instance, q.Cost)
	if q.Allowed {
		return s + fmt.Sprintf("admitted, %d left", q.Remaining)
	}
	return s + fmt.Sprintf("denied, retry after %v", q.RetryAfter)
}

// tickStep returns a step of 1, 2 or 5 times a power of ten (or a minute
// multiple) giving about six ticks over span.
func tickStep(span time.Duration) time.Duration {
	want := span / 6
	step := time.Microsecond
	for step < want {
		switch s := step; {
		case isPow10(s):
			step = 2 * s
		case isPow10(s / 2):
			step = s / 2 * 5
		default:
			step = 2 * s
		}
	}
	if step > time.Minute {
		step = (step + time.Minute - 1) / time.Minute * time.Minute
	}
	return step
}

// fmtAt formats an offset for an axis whose ticks are step apart.
func fmtAt(at, step time.Duration) string {
	if step >= time.Second {
		s := at.Round(time.Second).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		return s
	}
	decimals := 0
	for d := step; d < time.Second && decimals < 6; d *= 10 {
		decimals++
	}
	return fmt.Sprintf("%.*fs", decimals, at.Seconds())
}

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// windowStarts returns where the windows of tl's stores begin: the
// Timeline's WindowStart for a shared store, each instance's own (without
// repeats) when each keeps its own.
func (tl *Timeline) windowStarts() []time.Duration {
	var starts []time.Duration
	for _, lv := range tl.Levels {
		if lv.Instance >= 0 && !slices.Contains(starts, lv.WindowStart) {
			starts = append(starts, lv.WindowStart)
		}
	}
	if len(starts) == 0 {
		starts = append(starts, tl.WindowStart)
	}
	return starts
}
