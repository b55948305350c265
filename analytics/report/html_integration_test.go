//go:build integration

package report

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium finds Debian's chromium (deploy/local/chromium.sh installs it;
// `make test-integration` runs that script).
func chromium(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run deploy/local/chromium.sh (make test-integration does)")
	return ""
}

func hexColor(s string) [3]uint8 {
	var c [3]uint8
	fmt.Sscanf(s, "#%02x%02x%02x", &c[0], &c[1], &c[2])
	return c
}

// barRuns counts the vertical runs of color in column x: one per bar.
func barRuns(img image.Image, x int, c [3]uint8) int {
	runs, in := 0, false
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		r, g, b, _ := img.At(x, y).RGBA()
		hit := uint8(r>>8) == c[0] && uint8(g>>8) == c[1] && uint8(b>>8) == c[2]
		if hit && !in {
			runs++
		}
		in = hit
	}
	return runs
}

// TestIntegrationHTMLRendersCharts renders the golden fixture's HTML with
// headless Chromium to a PNG and checks that every bar of every chart was
// drawn, for this week and the previous one.
func TestIntegrationHTMLRendersCharts(t *testing.T) {
	rep, err := Build(context.Background(), loadRecorded(t), goldenRange(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, rep); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The charts section is what we check; make the window tall enough.
	cs := charts(rep)
	bars, prevBars := 0, 0
	height := 400
	for _, c := range cs {
		bars += len(c.labels)
		for _, p := range c.prev {
			if p == p { // not NaN
				prevBars++
			}
		}
		height += 40 + len(c.labels)*34 + 30
	}
	if len(cs) < 5 {
		t.Fatalf("%d charts", len(cs))
	}
	shot := filepath.Join(dir, "report.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", fmt.Sprintf("--window-size=1200,%d", height),
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v: %s", err, out)
	}
	pf, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("SLUICE_REPORT_PNG"); keep != "" {
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(keep, b, 0o644)
	}
	// Bars start at x = body margin (24) + the chart label column.
	x := 24 + ChartLabelWidth + 1
	if got := barRuns(img, x, hexColor(ColorThisWeek)); got != bars {
		t.Errorf("%d this-week bars drawn, want %d (%d charts)", got, bars, len(cs))
	}
	if got := barRuns(img, x, hexColor(ColorPrevWeek)); got != prevBars {
		t.Errorf("%d previous-week bars drawn, want %d", got, prevBars)
	}
	if !strings.Contains(rep.Headline[0].Name, "requests") {
		t.Errorf("headline: %+v", rep.Headline[0])
	}
}
