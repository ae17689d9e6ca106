#include "sim/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace meridian::sim {
namespace {

constexpr int kWidth = 720, kHeight = 300;
constexpr int kLeft = 70, kRight = 150, kTop = 34, kBottom = 44;
// Colour-blind-safe palette (Okabe-Ito).
const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                          "#E69F00", "#56B4E9", "#F0E442", "#000000"};

std::string Num(double v) {
  char buf[32];
  if (std::fabs(v) >= 10000) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else if (std::fabs(v) >= 100 || v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f", v);
  }
  return buf;
}

std::string Header(const std::string& title, const std::string& y_label) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" viewBox=\"0 0 " +
         std::to_string(kWidth) + " " + std::to_string(kHeight) + "\" width=\"" +
         std::to_string(kWidth) + "\" height=\"" + std::to_string(kHeight) +
         "\" font-family=\"sans-serif\" font-size=\"12\"><title>" + HtmlEscape(title) +
         "</title><text x=\"" + std::to_string(kLeft) + "\" y=\"18\" font-size=\"14\" " +
         "font-weight=\"bold\">" + HtmlEscape(title) + "</text><text transform=\"translate(14," +
         std::to_string(kTop + (kHeight - kTop - kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + HtmlEscape(y_label) + "</text>";
}

std::string YAxis(double lo, double hi) {
  std::string out;
  const int plot_h = kHeight - kTop - kBottom;
  for (int k = 0; k <= 4; ++k) {
    double v = lo + (hi - lo) * k / 4;
    int y = kTop + plot_h - plot_h * k / 4;
    out += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + std::to_string(kWidth - kRight) +
           "\" y1=\"" + std::to_string(y) + "\" y2=\"" + std::to_string(y) +
           "\" stroke=\"#ddd\"/><text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" +
           std::to_string(y + 4) + "\" text-anchor=\"end\">" + Num(v) + "</text>";
  }
  return out;
}

std::string Legend(const std::vector<Series>& series) {
  std::string out;
  for (size_t i = 0; i < series.size(); ++i) {
    int y = kTop + 8 + static_cast<int>(i) * 18;
    out += "<rect x=\"" + std::to_string(kWidth - kRight + 12) + "\" y=\"" + std::to_string(y - 9) +
           "\" width=\"12\" height=\"12\" fill=\"" + kColours[i % 8] + "\"/><text x=\"" +
           std::to_string(kWidth - kRight + 30) + "\" y=\"" + std::to_string(y + 1) + "\">" +
           HtmlEscape(series[i].name) + "</text>";
  }
  return out;
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SvgLineChart(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<Series>& series,
                         bool fit_y) {
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 0;
  bool first = true;
  for (const Series& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      x_lo = first ? s.x[i] : std::min(x_lo, s.x[i]);
      x_hi = first ? s.x[i] : std::max(x_hi, s.x[i]);
      y_lo = first && fit_y ? s.y[i] : std::min(y_lo, s.y[i]);
      y_hi = first && fit_y ? s.y[i] : std::max(y_hi, s.y[i]);
      first = false;
    }
  }
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  if (fit_y) {
    // A margin of a tenth of the range, so lines do not run along the frame.
    const double pad = std::max(0.1 * (y_hi - y_lo), 0.05);
    y_lo -= pad;
    y_hi += pad;
  } else {
    y_lo = 0;
    if (y_hi <= 0) y_hi = 1;
  }
  const int plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  std::string out = Header(title, y_label) + YAxis(y_lo, y_hi);
  for (int k = 0; k <= 4; ++k) {
    int x = kLeft + plot_w * k / 4;
    out += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(kHeight - kBottom + 16) +
           "\" text-anchor=\"middle\">" + Num(x_lo + (x_hi - x_lo) * k / 4) + "</text>";
  }
  out += "<text x=\"" + std::to_string(kLeft + plot_w / 2) + "\" y=\"" +
         std::to_string(kHeight - 8) + "\" text-anchor=\"middle\">" + HtmlEscape(x_label) +
         "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    std::string points;
    for (size_t k = 0; k < series[i].x.size() && k < series[i].y.size(); ++k) {
      double px = kLeft + plot_w * (series[i].x[k] - x_lo) / (x_hi - x_lo);
      double py = kTop + plot_h - plot_h * (series[i].y[k] - y_lo) / (y_hi - y_lo);
      char buf[48];
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px, py);
      points += buf;
    }
    out += "<polyline fill=\"none\" stroke-width=\"1.6\" stroke=\"" + std::string(kColours[i % 8]) +
           (series[i].dashed ? "\" stroke-dasharray=\"5,3" : "") + "\" points=\"" + points + "\"/>";
  }
  return out + Legend(series) + "</svg>";
}

std::string HtmlReportStart(const std::string& title) {
  return "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
         HtmlEscape(title) +
         "</title><style>body{font-family:sans-serif;margin:24px;color:#111;max-width:1000px}"
         "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:4px 10px;"
         "text-align:right}th:first-child,td:first-child{text-align:left}"
         "svg{display:block;margin:18px 0;max-width:100%;height:auto}</style></head><body><h1>" +
         HtmlEscape(title) + "</h1>";
}

std::string SvgBarChart(const std::string& title, const std::string& y_label,
                        const std::vector<std::string>& groups, const std::vector<Series>& series) {
  double y_hi = 0;
  for (const Series& s : series) {
    for (double v : s.y) y_hi = std::max(y_hi, v);
  }
  if (y_hi <= 0) y_hi = 1;
  const int plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  std::string out = Header(title, y_label) + YAxis(0, y_hi);
  const double group_w = static_cast<double>(plot_w) / std::max<size_t>(1, groups.size());
  const double bar_w = group_w * 0.8 / std::max<size_t>(1, series.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    double gx = kLeft + group_w * static_cast<double>(g);
    out += "<text x=\"" + Num(gx + group_w / 2) + "\" y=\"" +
           std::to_string(kHeight - kBottom + 16) + "\" text-anchor=\"middle\">" +
           HtmlEscape(groups[g]) + "</text>";
    for (size_t i = 0; i < series.size(); ++i) {
      if (g >= series[i].y.size()) continue;
      double h = plot_h * series[i].y[g] / y_hi;
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>",
                    gx + group_w * 0.1 + bar_w * static_cast<double>(i), kTop + plot_h - h, bar_w,
                    h, kColours[i % 8]);
      out += buf + HtmlEscape(series[i].name + " " + groups[g] + ": " + Num(series[i].y[g])) +
             "</title></rect>";
    }
  }
  return out + Legend(series) + "</svg>";
}

}  // namespace meridian::sim
