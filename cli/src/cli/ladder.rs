//! `nablac run --ladder NAME=FROM:TO:COUNT`: the markets of a revaluation ladder (a grid when
//! several inputs are laddered) and its plot.

use anyhow::{bail, Result};
use nablac::emit::Manifest;
use nablac_runtime::Report;
use plotters::prelude::*;

/// Most markets one `nablac run` takes (a grid's product): the driver's limit.
pub use nablac::driver::MAX_RUN_MARKETS as MAX_LADDER_MARKETS;

/// One `--ladder NAME=FROM:TO:COUNT`: COUNT values of NAME evenly from FROM to TO (both
/// included; COUNT 1 only where FROM = TO: one market cannot span a range).
#[derive(Clone, Debug, PartialEq)]
pub struct LadderArg {
    pub name: String,
    pub from: f64,
    pub to: f64,
    pub count: u32,
}

impl LadderArg {
    /// The laddered values, FROM first.
    pub fn values(&self) -> Vec<f64> {
        let n = self.count;
        (0..n)
            .map(|k| {
                if k + 1 == n && n > 1 {
                    self.to
                } else {
                    self.from + (self.to - self.from) * f64::from(k) / f64::from((n - 1).max(1))
                }
            })
            .collect()
    }
}

pub fn parse_ladder(s: &str) -> Result<LadderArg, String> {
    let shape = || format!("expected NAME=FROM:TO:COUNT (e.g. spot=80:120:9), got '{s}'");
    let (name, range) = s.split_once('=').ok_or_else(shape)?;
    let parts: Vec<&str> = range.split(':').collect();
    let [from, to, count] = parts[..] else {
        return Err(shape());
    };
    let number = |t: &str, what: &str| -> Result<f64, String> {
        let v: f64 = t
            .trim()
            .parse()
            .map_err(|_| format!("{what} '{t}' is not a number (in '{s}')"))?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(format!("{what} '{t}' is not finite (in '{s}')"))
        }
    };
    let count = super::number::whole(count, u64::from(u32::MAX))
        .ok()
        .filter(|&c| c >= 1)
        .ok_or_else(|| {
            format!("COUNT '{count}' must be a whole number of markets, at least 1 (in '{s}')")
        })? as u32;
    let name = name.trim();
    if name.is_empty() {
        return Err(shape());
    }
    let (from, to) = (number(from, "FROM")?, number(to, "TO")?);
    // One market cannot span a range: FROM:TO:1 would silently drop TO.
    if count == 1 && from != to {
        return Err(format!(
            "COUNT 1 is one market, but FROM {from} and TO {to} differ (in '{s}'): give COUNT 2 \
             or more for a range, or FROM = TO for one value (or --market {name}={from})"
        ));
    }
    Ok(LadderArg {
        name: name.to_string(),
        from,
        to,
        count,
    })
}

/// The markets of the grid of `ladders` around `base` (inputs in `manifest.inputs` order): the
/// first `--ladder` outermost, the last innermost. Refuses an unknown or repeated input and a
/// grid of more than [`MAX_LADDER_MARKETS`] markets.
pub fn markets(manifest: &Manifest, base: &[f64], ladders: &[LadderArg]) -> Result<Vec<Vec<f64>>> {
    let index = indices(&manifest.inputs, ladders)?;
    let total = count(ladders)?;
    let mut out = vec![base.to_vec()];
    for (l, &i) in ladders.iter().zip(&index) {
        let values = l.values();
        out = out
            .iter()
            .flat_map(|m| {
                values.iter().map(move |&v| {
                    let mut m = m.clone();
                    m[i] = v;
                    m
                })
            })
            .collect();
    }
    debug_assert_eq!(out.len(), total);
    Ok(out)
}

/// Each ladder's input index in `inputs`; refuses an unknown or repeated input.
pub fn indices(inputs: &[String], ladders: &[LadderArg]) -> Result<Vec<usize>> {
    let mut index = Vec::with_capacity(ladders.len());
    for (k, l) in ladders.iter().enumerate() {
        let Some(i) = inputs.iter().position(|n| *n == l.name) else {
            bail!(
                "--ladder {}: the tape has no input {} (inputs: {})",
                l.name,
                l.name,
                inputs.join(", ")
            );
        };
        if ladders[..k].iter().any(|p| p.name == l.name) {
            bail!(
                "--ladder {}: laddered twice; give each input one --ladder",
                l.name
            );
        }
        index.push(i);
    }
    Ok(index)
}

/// The grid's market count; refuses more than [`MAX_LADDER_MARKETS`].
pub fn count(ladders: &[LadderArg]) -> Result<usize> {
    let total = ladders
        .iter()
        .try_fold(1usize, |n, l| n.checked_mul(l.count as usize))
        .filter(|&n| n <= MAX_LADDER_MARKETS);
    let Some(total) = total else {
        bail!(
            "the ladder asks for {} markets; at most {MAX_LADDER_MARKETS} run in one command",
            ladders
                .iter()
                .map(|l| l.count.to_string())
                .collect::<Vec<_>>()
                .join(" x ")
        );
    };
    Ok(total)
}

/// An SVG of each output's value (with ±1 standard error bars) and of its Greek with respect to
/// `greek` (None: the price kernel has none) against the first laddered input; markets that
/// differ in the other laddered inputs are separate lines.
pub fn svg(
    manifest: &Manifest,
    ladders: &[LadderArg],
    markets: &[Vec<f64>],
    reports: &[Report],
    greek: Option<&str>,
) -> Result<String> {
    let mut out = String::new();
    draw(&mut out, manifest, ladders, markets, reports, greek).map_err(anyhow::Error::msg)?;
    Ok(out)
}

/// One line of the plot: its label and (x, y, standard error) points.
type Line = (String, Vec<(f64, f64, f64)>);

fn lines(
    manifest: &Manifest,
    ladders: &[LadderArg],
    markets: &[Vec<f64>],
    reports: &[Report],
    y: impl Fn(&nablac_runtime::OutputReport) -> Option<(f64, f64)>,
) -> Vec<Line> {
    let pos = |name: &str| manifest.inputs.iter().position(|n| n == name);
    let x = pos(&ladders[0].name).unwrap_or(0);
    let others: Vec<usize> = ladders[1..].iter().filter_map(|l| pos(&l.name)).collect();
    let mut out: Vec<Line> = Vec::new();
    for (oi, name) in manifest.outputs.iter().enumerate() {
        let mut by_rest: Vec<(Vec<u64>, Line)> = Vec::new();
        for (m, r) in markets.iter().zip(reports) {
            let Some((v, se)) = r.outputs.get(oi).and_then(&y) else {
                continue;
            };
            let key: Vec<u64> = others.iter().map(|&i| m[i].to_bits()).collect();
            let at = match by_rest.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let rest: Vec<String> = others
                        .iter()
                        .map(|&i| format!("{}={}", manifest.inputs[i], m[i]))
                        .collect();
                    let label = if rest.is_empty() {
                        name.clone()
                    } else {
                        format!("{name} ({})", rest.join(", "))
                    };
                    by_rest.push((key, (label, Vec::new())));
                    by_rest.len() - 1
                }
            };
            by_rest[at].1 .1.push((m[x], v, se));
        }
        out.extend(by_rest.into_iter().map(|(_, l)| l));
    }
    out
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(30, 90, 200),
    RGBColor(200, 40, 40),
    RGBColor(40, 150, 60),
    RGBColor(150, 60, 170),
    RGBColor(230, 130, 20),
    RGBColor(60, 60, 60),
];

fn draw(
    out: &mut String,
    manifest: &Manifest,
    ladders: &[LadderArg],
    markets: &[Vec<f64>],
    reports: &[Report],
    greek: Option<&str>,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let xname = &ladders[0].name;
    let values = lines(manifest, ladders, markets, reports, |o| {
        Some((o.value, o.stderr))
    });
    let greeks = greek.map(|g| {
        lines(manifest, ladders, markets, reports, |o| {
            let k = o.greeks.iter().position(|(n, _)| n == g)?;
            Some((o.greeks[k].1, o.greek_stderr.get(k).copied().unwrap_or(0.0)))
        })
    });
    let height = if greeks.is_some() { 800 } else { 450 };
    let root = SVGBackend::with_string(out, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = if greeks.is_some() {
        root.split_evenly((2, 1))
    } else {
        vec![root.clone()]
    };
    let mut plots = vec![(values, "value".to_string())];
    if let (Some(g), Some(name)) = (greeks, greek) {
        plots.push((g, format!("d value / d {name}")));
    }
    for (panel, (lines, ydesc)) in panels.iter().zip(&plots) {
        let pts = lines.iter().flat_map(|(_, p)| p.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y, se) in pts.filter(|(x, y, se)| x.is_finite() && y.is_finite() && se.is_finite())
        {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y - se);
            y1 = y1.max(y + se);
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        let pad = |a: f64, b: f64| {
            let d = if b > a {
                (b - a) * 0.05
            } else {
                a.abs().max(1.0) * 0.05
            };
            (a - d, b + d)
        };
        let ((x0, x1), (y0, y1)) = (pad(x0, x1), pad(y0, y1));
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{ydesc} against {xname}"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(xname.as_str())
            .y_desc(ydesc.as_str())
            .draw()
            .map_err(|e| err(&e))?;
        for (k, (label, points)) in lines.iter().enumerate() {
            let c = COLOURS[k % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|&(x, y, _)| (x, y)),
                    c.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
            // ±1 standard error at each market.
            for &(x, y, se) in points.iter().filter(|p| p.2 > 0.0) {
                chart
                    .draw_series(LineSeries::new([(x, y - se), (x, y + se)], c))
                    .map_err(|e| err(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ladder_spans_its_range_and_a_grid_nests_the_first_outermost() {
        let l = parse_ladder("spot=80:120:5").unwrap();
        assert_eq!(l.values(), vec![80.0, 90.0, 100.0, 110.0, 120.0]);
        assert_eq!(parse_ladder("vol=0.2:0.2:1").unwrap().values(), vec![0.2]);
        assert_eq!(parse_ladder("spot=80:120:1e1").unwrap().count, 10);
        let one = parse_ladder("vol=0.2:9:1").unwrap_err();
        assert!(
            one.contains("COUNT 1 is one market") && one.contains("--market vol=0.2"),
            "{one}"
        );
        for bad in [
            "spot",
            "spot=1:2",
            "spot=1:2:0",
            "spot=a:2:3",
            "spot=1:inf:3",
            "=1:2:3",
        ] {
            assert!(parse_ladder(bad).is_err(), "{bad}");
        }
    }
}
