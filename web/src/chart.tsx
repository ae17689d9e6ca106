// A time-series chart (uPlot): one line per series, sized to its container.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

export interface Series {
  label: string;
  values: (number | null)[];
  dash?: number[]; // a dashed line (a budget's limit, a forecast)
}

// Distinct on white and readable as lines; the legend names each one.
const PALETTE = ['#1f5fbf', '#c0392b', '#1e8449', '#8e44ad', '#b9770e', '#117a8b', '#6d4c41', '#555f6d'];

export function Chart(props: {
  title: string;
  at: number[];
  series: Series[];
  unit?: '%' | 'GPUs' | 'GiB' | 'jobs' | 'cost';
  testId?: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = props.series.map((s) => s.label).join('\u0000') + props.unit;
  const data = [props.at, ...props.series.map((s) => s.values)] as uPlot.AlignedData;

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const scale = props.unit === '%' ? 100 : 1;
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height: 220,
      series: [
        {},
        ...props.series.map((s, i) => ({
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          width: 2,
          dash: s.dash,
          spanGaps: false,
          value: (_u: uPlot, v: number | null) =>
            v == null ? '–' : props.unit === '%' ? `${Math.round(v * scale)}%` : String(+v.toFixed(2)),
        })),
      ],
      scales: props.unit === '%' ? { y: { range: [0, 1] } } : { y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [
        { stroke: '#3b4250', grid: { stroke: '#e3e6eb' } },
        {
          stroke: '#3b4250',
          grid: { stroke: '#e3e6eb' },
          values: (_u, ticks) => ticks.map((t) => (props.unit === '%' ? `${Math.round(t * 100)}%` : String(t))),
        },
      ],
      legend: { live: true },
    };
    plot.current = new uPlot(opts, data, el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height: 220 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuilt only when the series change; new points go through setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape]);

  useEffect(() => {
    plot.current?.setData(data);
  });

  const empty = props.at.length < 2;
  return (
    <figure class="chart" data-testid={props.testId}>
      <figcaption>{props.title}</figcaption>
      {empty && <p class="muted">Collecting samples: the server records one every few seconds.</p>}
      <div ref={box} class="chart-box" role="img" aria-label={`${props.title}: ${props.series.map((s) => s.label).join(', ')}`} />
    </figure>
  );
}
