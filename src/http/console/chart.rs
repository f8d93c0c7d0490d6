//! The overview's chart, drawn on the server as SVG: one stacked bar per hour, delivered
//! attempts at the bottom and failed ones on top. Colours come with text (a legend and a
//! `<title>` per bar) so the chart reads without colour too.

use maud::{html, Markup};

use crate::store::HourCount;

const WIDTH: i64 = 960;
const HEIGHT: i64 = 240;
const LEFT: i64 = 48;
const BOTTOM: i64 = 28;
const TOP: i64 = 12;

/// The stacked bar chart of `hours` (oldest first).
pub fn hourly(hours: &[HourCount]) -> Markup {
    let max = hours.iter().map(|h| h.delivered + h.failed).max().unwrap_or(0).max(1);
    let plot_h = HEIGHT - BOTTOM - TOP;
    let slot = (WIDTH - LEFT) / i64::try_from(hours.len().max(1)).unwrap_or(1);
    let bar = (slot * 7 / 10).max(1);
    let scale = |n: i64| n * plot_h / max;
    html! {
        svg.chart viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
            aria-label="Delivery attempts per hour over the last 24 hours, delivered and failed" {
            line x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH) y2=(HEIGHT - BOTTOM) stroke="#8a94a6" stroke-width="1" {}
            text x=(LEFT - 6) y=(TOP + 10) text-anchor="end" font-size="12" fill="#4a5568" { (max) }
            text x=(LEFT - 6) y=(HEIGHT - BOTTOM) text-anchor="end" font-size="12" fill="#4a5568" { "0" }
            @for (i, h) in hours.iter().enumerate() {
                @let x = LEFT + i64::try_from(i).unwrap_or(0) * slot + (slot - bar) / 2;
                @let ok_h = scale(h.delivered);
                @let bad_h = scale(h.failed);
                @let base = HEIGHT - BOTTOM;
                @let hour_of_day = h.hour.rem_euclid(24);
                g.bar {
                    title { (format!("{hour_of_day:02}:00 UTC: {} delivered, {} failed", h.delivered, h.failed)) }
                    rect x=(x) y=(base - ok_h) width=(bar) height=(ok_h) fill="#2f855a" {}
                    rect x=(x) y=(base - ok_h - bad_h) width=(bar) height=(bad_h) fill="#c53030" {}
                }
                @if i % 3 == 0 {
                    text x=(x + bar / 2) y=(HEIGHT - 8) text-anchor="middle" font-size="12" fill="#4a5568" {
                        (format!("{hour_of_day:02}h"))
                    }
                }
            }
        }
        p.legend {
            span.swatch.good {} " delivered "
            span.swatch.bad {} " failed "
            span.muted { "(attempts per hour, UTC)" }
        }
    }
}
