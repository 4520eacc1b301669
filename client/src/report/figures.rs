//! The report's charts, drawn with `plotters` into SVG strings (no system font: the
//! text is SVG `<text>` the browser sets). Each function takes binned data and draws
//! one element per bin or cell, never one per write, so a large run stays small.

use super::run::{BlockMap, Cell, Class, Timeline};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plugpull::report::LagBucket;

/// Width of every chart, px.
pub const WIDTH: u32 = 760;
/// Height of the timeline and bar charts, px.
pub const HEIGHT: u32 = 280;

/// Bar colour of rates and counts.
pub const BAR: RGBColor = RGBColor(0x1F, 0x6F, 0xB4);
/// Colour of failures (lost writes, lost commits) and of the end marker.
pub const FAIL: RGBColor = RGBColor(0xC6, 0x28, 0x28);

/// The fill colour of a map class.
pub fn class_color(c: Class) -> RGBColor {
    match c {
        Class::Lost => FAIL,
        Class::Corrupt => RGBColor(0x6A, 0x1B, 0x9A),
        Class::Misdirected => RGBColor(0x15, 0x65, 0xC0),
        Class::Torn => RGBColor(0xEF, 0x6C, 0x00),
        Class::Intact => RGBColor(0x2E, 0x7D, 0x32),
        Class::NotWritten => RGBColor(0xDD, 0xDD, 0xDD),
    }
}

/// The fill colour of a map square: its class's colour ([`class_color`]), paler the
/// smaller the share of its blocks that failed (from 30 % of the colour over white
/// for one block in many, to the full colour when every block failed), so a square
/// with one lost block of 16 does not look like one that lost all 16.
pub fn cell_color(c: &Cell) -> RGBColor {
    let full = class_color(c.class);
    if c.failed == 0 {
        return full;
    }
    let t = 0.3 + 0.7 * c.share();
    let mix = |v: u8| (255.0 - (255.0 - f64::from(v)) * t).round() as u8;
    RGBColor(mix(full.0), mix(full.1), mix(full.2))
}

/// The `#RRGGBB` form of `c`, as the SVG carries it.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The y range of a chart with a legend, as a multiple of its tallest bar: the bars
/// stay in the lower 3/4, the legend (upper left, ~30 px of the 234 px plot) above.
pub const LEGEND_HEADROOM: f64 = 1.35;

type Res = Result<(), String>;

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart failed: {e:?}")
}

/// A timeline of `t`: one bar per non-empty bin (height = per-second rate), a red
/// vertical line at the run's end. `what` names the rate (`acknowledgements/s`, `tps`).
pub fn timeline_svg(t: &Timeline, what: &str) -> Result<String, String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, HEIGHT)).into_drawing_area();
        draw_timeline(&root, t, what)?;
        root.present().map_err(err)?;
    }
    Ok(s)
}

fn draw_timeline(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    t: &Timeline,
    what: &str,
) -> Res {
    root.fill(&WHITE).map_err(err)?;
    let x_max = (t.rates.len() as f64 * t.bin_secs).max(t.end_secs) * 1.02 + 0.01;
    // Headroom above the tallest bar for the legend in the upper left: the bars
    // reach at most 3/4 of the plot's height, the legend sits above them.
    let y_max = t.rates.iter().cloned().fold(0.0, f64::max).max(1.0) * LEGEND_HEADROOM;
    let mut chart = ChartBuilder::on(root)
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .label_style(("sans-serif", 14))
        .y_label_formatter(&|v| {
            if y_max >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        })
        .x_desc("seconds since the run's start")
        .y_desc(what)
        .draw()
        .map_err(err)?;
    let w = t.bin_secs;
    chart
        .draw_series(
            t.rates
                .iter()
                .enumerate()
                .filter(|(_, &r)| r > 0.0)
                .map(|(i, &r)| {
                    let x = i as f64 * w;
                    Rectangle::new([(x, 0.0), (x + w * 0.9, r)], BAR.filled())
                }),
        )
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(t.end_secs, 0.0), (t.end_secs, y_max)],
            FAIL.stroke_width(2),
        )))
        .map_err(err)?
        .label(format!("{} at {:.3} s", t.end_label, t.end_secs))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], FAIL.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)
}

/// A bar chart: one red bar per non-zero count, x labels from `label` (bar index →
/// text), axis descriptions `x_desc` and `y_desc`.
pub fn bars_svg(
    counts: &[u64],
    label: &dyn Fn(usize) -> String,
    x_desc: &str,
    y_desc: &str,
) -> Result<String, String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = counts.len().max(1);
        let y_max = (counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.1).ceil() as u64;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..n as f64, 0u64..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(y_max.min(10) as usize)
            .label_style(("sans-serif", 14))
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(i, &c)| {
                        let x = i as f64;
                        Rectangle::new([(x + 0.1, 0), (x + 0.9, c)], FAIL.filled())
                    }),
            )
            .map_err(err)?;
        // One label under each bar's place (at most 16, evenly spread).
        let step = n.div_ceil(16);
        let style =
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        chart
            .draw_series((0..n).step_by(step).map(|i| {
                EmptyElement::at((i as f64 + 0.5, 0)) + Text::new(label(i), (0, 6), style.clone())
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(s)
}

/// The lost-write lag histogram: one bar per non-empty bucket of `buckets`.
pub fn lag_svg(buckets: &[LagBucket], what: &str) -> Result<String, String> {
    let counts: Vec<u64> = buckets.iter().map(|b| b.count).collect();
    let label = |i: usize| match buckets.get(i) {
        Some(b) => match b.to_secs {
            Some(t) => format!("<{t} s"),
            None => format!("≥{} s", b.from_secs),
        },
        None => String::new(),
    };
    bars_svg(
        &counts,
        &label,
        "acknowledged this long before the run's end",
        what,
    )
}

/// Columns of the target map.
pub const MAP_COLUMNS: usize = 64;
/// Side of one map cell, px.
const CELL: i32 = 11;

/// The target map: one square per cell of `m`, row by row from block 0, coloured by
/// class, and a legend of every class below it (one swatch each).
pub fn map_svg(m: &BlockMap) -> Result<String, String> {
    let rows = m.cells.len().div_ceil(MAP_COLUMNS).max(1) as i32;
    let height = (rows * CELL + 50) as u32;
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let x0 = 10;
        for (i, c) in m.cells.iter().enumerate() {
            let (col, row) = ((i % MAP_COLUMNS) as i32, (i / MAP_COLUMNS) as i32);
            let (x, y) = (x0 + col * CELL, 10 + row * CELL);
            root.draw(&Rectangle::new(
                [(x, y), (x + CELL - 1, y + CELL - 1)],
                cell_color(c).filled(),
            ))
            .map_err(err)?;
        }
        let y = 10 + rows * CELL + 14;
        for (i, c) in Class::ALL.iter().enumerate() {
            let x = x0 + i as i32 * 120;
            root.draw(&Rectangle::new(
                [(x, y), (x + 12, y + 12)],
                class_color(*c).filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                c.name(),
                (x + 18, y),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `<rect` elements filled with `c`.
    fn rects(svg: &str, c: RGBColor) -> usize {
        let fill = format!("fill=\"{}\"", hex(c));
        svg.split("<rect")
            .skip(1)
            .filter(|r| r.split('>').next().unwrap_or("").contains(&fill))
            .count()
    }

    #[test]
    fn the_timeline_has_one_bar_per_busy_bin_and_one_end_marker() {
        let t = Timeline {
            bin_secs: 1.0,
            rates: vec![5.0, 0.0, 7.0, 2.0],
            end_secs: 3.5,
            end_label: "last acknowledgement".into(),
        };
        let svg = timeline_svg(&t, "acknowledgements/s").unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert_eq!(rects(&svg, BAR), 3);
        // The end marker and its legend swatch.
        assert_eq!(svg.matches(&format!("stroke=\"{}\"", hex(FAIL))).count(), 2);
        assert!(svg.contains("last acknowledgement at 3.500 s"));
    }

    /// `(y, y + height)` of each `<rect` whose tag contains `needle`.
    fn spans(svg: &str, needle: &str) -> Vec<(f64, f64)> {
        let attr = |tag: &str, name: &str| -> f64 {
            let k = format!(" {name}=\"");
            let at = tag.find(&k).map(|i| i + k.len()).unwrap();
            tag[at..at + tag[at..].find('"').unwrap()].parse().unwrap()
        };
        svg.split("<rect")
            .skip(1)
            .map(|r| r.split('>').next().unwrap())
            .filter(|tag| tag.contains(needle))
            .map(|tag| (attr(tag, "y"), attr(tag, "y") + attr(tag, "height")))
            .collect()
    }

    /// The legend (its box, upper left) sits above the tallest bar, wherever that is.
    #[test]
    fn the_timeline_legend_stays_off_the_bars() {
        let t = Timeline {
            bin_secs: 1.0,
            rates: vec![9.0, 3.0, 1.0],
            end_secs: 3.0,
            end_label: "last acknowledgement".into(),
        };
        let svg = timeline_svg(&t, "acknowledgements/s").unwrap();
        let bars = spans(&svg, &format!("fill=\"{}\"", hex(BAR)));
        let tallest_top = bars.iter().map(|b| b.0).fold(f64::MAX, f64::min);
        let legend = spans(&svg, "stroke=\"#000000\"");
        assert_eq!(legend.len(), 1, "{svg}");
        assert!(
            legend[0].1 < tallest_top,
            "legend {legend:?}, bars {bars:?}"
        );
    }

    /// A square's colour shows the share of its blocks that failed.
    #[test]
    fn a_square_is_paler_the_fewer_of_its_blocks_failed() {
        let c = |class, failed, acked| {
            cell_color(&Cell {
                class,
                failed,
                acked,
            })
        };
        assert_eq!(c(Class::Lost, 16, 16), FAIL);
        assert_eq!(c(Class::Lost, 8, 16), RGBColor(0xDA, 0x73, 0x73));
        assert_eq!(c(Class::Lost, 1, 16), RGBColor(0xEB, 0xB5, 0xB5));
        assert_eq!(c(Class::Intact, 0, 16), class_color(Class::Intact));
        assert_eq!(c(Class::NotWritten, 0, 0), class_color(Class::NotWritten));
    }

    #[test]
    fn the_lag_histogram_has_one_bar_per_non_empty_bucket() {
        let b = plugpull::report::lag_histogram(&[0.0, 0.05, 0.05, 2.0, 1000.0]);
        let svg = lag_svg(&b, "lost writes").unwrap();
        assert_eq!(rects(&svg, FAIL), 4);
        assert!(svg.contains(">\n≥300 s\n</text>"), "{svg}");
        assert!(svg.contains(">\n&lt;0.01 s\n</text>"), "{svg}");
    }

    #[test]
    fn the_per_client_chart_has_one_bar_per_client_with_losses() {
        let svg = bars_svg(&[0, 3, 0, 1, 9], &|i| format!("c{i}"), "client", "lost").unwrap();
        assert_eq!(rects(&svg, FAIL), 3);
    }

    #[test]
    fn the_map_has_one_square_per_cell_and_one_swatch_per_class() {
        let m = BlockMap {
            blocks_per_cell: 1,
            cells: [
                Class::Intact,
                Class::Lost,
                Class::Lost,
                Class::NotWritten,
                Class::Torn,
            ]
            .into_iter()
            .map(|class| Cell {
                class,
                failed: u32::from(matches!(class, Class::Lost | Class::Torn)),
                acked: u32::from(class != Class::NotWritten),
            })
            .collect(),
            unplaced_failures: 0,
        };
        let svg = map_svg(&m).unwrap();
        // Cells plus one legend swatch per class.
        assert_eq!(rects(&svg, class_color(Class::Lost)), 2 + 1);
        assert_eq!(rects(&svg, class_color(Class::Intact)), 1 + 1);
        assert_eq!(rects(&svg, class_color(Class::Corrupt)), 1);
        assert_eq!(svg.matches("<text").count(), 6);
    }
}
