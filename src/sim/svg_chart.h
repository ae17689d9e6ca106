#pragma once

#include <string>
#include <vector>

namespace meridian::sim {

// Small self-contained SVG charts for the HTML reports (no script, no external assets).

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
  bool dashed = false;  // drawn dashed (a reference, such as published figures)
};

// A line chart of several series against a shared x axis. The y axis starts at 0, or with
// `fit_y` spans the values' own range (to show small differences, or negative ones).
std::string SvgLineChart(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<Series>& series,
                         bool fit_y = false);

// The start of a self-contained report page (styles and the title as a heading), up to the
// open body; the caller appends its content and "</body></html>".
std::string HtmlReportStart(const std::string& title);

// Grouped bars: one group per label, one bar per series (series[i].y[k] is the value of
// series i in group k).
std::string SvgBarChart(const std::string& title, const std::string& y_label,
                        const std::vector<std::string>& groups, const std::vector<Series>& series);

std::string HtmlEscape(const std::string& text);

}  // namespace meridian::sim
