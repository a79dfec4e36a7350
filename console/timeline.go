package console

import (
	"slices"
	"time"
)

// picture is a call's timeline drawn to scale: a mark on a time axis for
// each moment the records give a time for.
type picture struct {
	Width, Height, AxisY, X0, X1 int
	Marks                        []mark
	Span                         string // the time the axis covers
}

// mark is one moment: its label sits on one of four rows, so that close
// moments do not overwrite each other.
type mark struct {
	X, LabelY int
	What, At  string // At: time since the first moment
	Class     string
}

const (
	pictureWidth = 900
	pictureAxisY = 70
	pictureInset = 60
	labelSpace   = 130 // marks closer than this take the next row
)

// labelRows are the labels' baselines: two rows above the axis, two below;
// each label is two lines of text (what, and when).
var labelRows = []int{16, 44, 98, 126}

// newPicture lays out the timed steps, and "now" for a running call.
func newPicture(steps []step, running bool, now time.Time) *picture {
	var timed []step
	for _, s := range steps {
		if s.When != nil && !(s.What == "placed" && len(timed) > 0 && timed[len(timed)-1].When.Equal(*s.When)) {
			timed = append(timed, s)
		}
	}
	if running {
		timed = append(timed, step{What: "now (running)", When: &now})
	}
	if len(timed) == 0 {
		return nil
	}
	slices.SortStableFunc(timed, func(a, b step) int { return a.When.Compare(*b.When) })
	first, last := *timed[0].When, *timed[len(timed)-1].When
	p := &picture{Width: pictureWidth, Height: 146, AxisY: pictureAxisY, X0: pictureInset, X1: pictureWidth - pictureInset, Span: last.Sub(first).String()}
	span := max(last.Sub(first), time.Nanosecond)
	row, prevX := 0, -labelSpace
	for _, s := range timed {
		x := p.X0 + int(float64(p.X1-p.X0)*float64(s.When.Sub(first))/float64(span))
		if x-prevX < labelSpace {
			row = (row + 1) % len(labelRows)
		} else {
			row = 0
		}
		prevX = x
		p.Marks = append(p.Marks, mark{X: x, LabelY: labelRows[row], What: s.What, At: "+" + s.When.Sub(first).Round(time.Microsecond).String(), Class: markClass(s.What)})
	}
	return p
}

func markClass(what string) string {
	switch what {
	case "decided":
		return "decided"
	case "handler stopped":
		return "stopped"
	case "cancel asked (too late)":
		return "late"
	}
	return "step"
}
