// stepstone in JupyterLab: each step cell's state on the cell, and a panel to read and
// steer the run. Everything shown comes from the Jupyter server extension
// (`stepstone/lab/handlers.py`), which reads the store as `stepstone status` does; the
// panel's actions are the CLI's and MCP's, with their refusals.

import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, InputDialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Contents, ServerConnection } from '@jupyterlab/services';
import { listIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

const POLL_MS = 1500;
const PANEL_ID = 'stepstone-panel';
const OPEN_PANEL = 'stepstone:open-panel';

interface ICellState {
  index: number;
  id: string | null;
  step: string | null;
  state: string | null;
  reason: string;
}

interface IRunView {
  notebook: string;
  run: string | null;
  running: string | null;
  cells: ICellState[];
  next_action: string;
  finished?: string | null;
  decisions: Array<{
    key: string;
    value: string;
    why: string;
    history: Array<{ value: string; why: string; time: string; via: string }>;
  }>;
  unknowns: Array<{
    id: string;
    question: string;
    state: string;
    answer: string | null;
    why: string | null;
  }>;
  effects: Array<{ [key: string]: any }>;
  timeline: Array<{
    time: string;
    subject: string;
    status: string;
    step: string;
    by: string;
  }>;
}

async function request(
  endpoint: string,
  init: RequestInit = {}
): Promise<any> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'stepstone', endpoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const data = text ? JSON.parse(text) : {};
  if (!response.ok) {
    throw new Error(data.message || data.error || response.statusText);
  }
  return data;
}

function readRun(path: string): Promise<IRunView> {
  return request(`run?path=${encodeURIComponent(path)}`);
}

function act(path: string, action: string, given: object): Promise<any> {
  return request('action', {
    method: 'POST',
    body: JSON.stringify({ path, action, ...given })
  });
}

function el(
  tag: string,
  attrs: { [key: string]: string } = {},
  ...children: Array<Node | string>
): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child);
  }
  return node;
}

/** A record's time as the timeline shows it: `2026-12-07 23:20:23 UTC`. */
function when(stamp: string): string {
  return stamp.replace('T', ' ').replace(/(\.\d+)?Z$/, '') + ' UTC';
}

/** A text box whose Enter presses `button`. */
function box(label: string, button: () => HTMLElement): HTMLInputElement {
  const input = el('input', { placeholder: label, 'aria-label': label }) as HTMLInputElement;
  input.addEventListener('keydown', event => {
    if (event.key === 'Enter') {
      button().click();
    }
  });
  return input;
}

function badge(state: string, reason: string): HTMLElement {
  const node = el('span', { class: 'stepstone-state', 'data-state': state }, state);
  node.title = reason || state;
  return node;
}

/** Keeps the badges of one notebook's step cells in step with its run. */
class Badges {
  constructor(private panel: NotebookPanel) {
    this.timer = window.setInterval(() => void this.refresh(), POLL_MS);
    panel.disposed.connect(() => window.clearInterval(this.timer));
    void panel.context.ready.then(() => this.refresh());
  }

  async refresh(): Promise<void> {
    if (this.panel.isDisposed || !this.panel.isVisible) {
      return;
    }
    try {
      this.shown = await readRun(this.panel.context.path);
    } catch (error) {
      return; // no server extension, or the notebook is not saved yet
    }
    this.draw();
  }

  draw(): void {
    if (!this.shown) {
      return;
    }
    const byId = new Map<string, ICellState>();
    for (const cell of this.shown.cells) {
      if (cell.id) {
        byId.set(cell.id, cell);
      }
    }
    // Run All queues every cell as running: the first of them runs, the others wait
    const executing = this.panel.content.widgets.find(
      widget => (widget.model as any).executionState === 'running'
    );
    this.panel.content.widgets.forEach((widget, i) => {
      const found = byId.get(widget.model.id) ?? this.shown!.cells[i];
      const old = widget.node.querySelector(':scope > .stepstone-state');
      if (!found || !found.step) {
        old?.remove();
        return;
      }
      let state = found.state ?? 'pending';
      let reason = found.reason;
      if (widget === executing) {
        state = 'running';
        reason = 'running now (this kernel)';
      }
      const node = badge(state, `${found.step}: ${state}${reason ? ` — ${reason}` : ''}`);
      node.dataset.step = found.step;
      widget.addClass('stepstone-step');
      if (old) {
        old.replaceWith(node);
      } else {
        widget.node.prepend(node);
      }
    });
  }

  shown: IRunView | null = null;
  private timer: number;
}

/** The panel: the plan, decisions, unknowns, effects and timeline of the current
 * notebook's run, with the actions the CLI and MCP have. */
class RunPanel extends Widget {
  constructor(
    private tracker: INotebookTracker,
    private contents: Contents.IManager
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('stepstone-panel');
    this.title.icon = listIcon;
    this.title.caption = "stepstone: the notebook's run";
    this.node.tabIndex = 0;
    tracker.currentChanged.connect(() => void this.refresh());
    window.setInterval(() => void this.refresh(), POLL_MS * 2);
  }

  private busy = false;
  private error = '';
  private drawn = ''; // what the panel shows now, to redraw only when it changes

  path(): string | null {
    return this.tracker.currentWidget?.context.path ?? null;
  }

  async refresh(): Promise<void> {
    if (!this.isVisible || this.busy) {
      return;
    }
    const path = this.path();
    if (!path) {
      this.node.replaceChildren(
        el('p', { class: 'stepstone-quiet' }, 'Open a notebook to see its run.')
      );
      return;
    }
    let shown: IRunView;
    try {
      shown = await readRun(path);
    } catch (error) {
      this.drawn = '';
      this.node.replaceChildren(
        el('p', { class: 'stepstone-error' }, String((error as Error).message))
      );
      return;
    }
    const said = JSON.stringify([path, shown, this.error]);
    // what a person is typing stays: redrawn once the boxes are left empty
    if (said === this.drawn || this.editing()) {
      return;
    }
    this.drawn = said;
    this.draw(path, shown);
  }

  /** Whether a person is typing in the panel: a box has focus or holds text. */
  private editing(): boolean {
    const boxes = Array.from(this.node.querySelectorAll('input'));
    return boxes.some(b => b.value !== '' || b === document.activeElement);
  }

  private async run(action: string, given: object): Promise<void> {
    const path = this.path();
    if (!path) {
      return;
    }
    this.busy = true;
    try {
      await act(path, action, given);
      this.error = '';
      if (action === 'decide') {
        await this.syncDecideLines(path);
      }
    } catch (error) {
      this.error = `${action} refused: ${(error as Error).message}`;
    } finally {
      this.busy = false;
    }
    for (const input of Array.from(this.node.querySelectorAll('input'))) {
      input.value = ''; // sent: the panel shows what was recorded
    }
    (document.activeElement as HTMLElement | null)?.blur();
    this.drawn = '';
    await this.refresh();
  }

  /** A revision rewrote the notebook's `%decide` line on disk: the open notebook's
   * cell says the same, so that saving it keeps the revision. */
  private async syncDecideLines(path: string): Promise<void> {
    const panel = this.tracker.currentWidget;
    const model = panel?.content.model;
    if (!panel || !model || panel.context.path !== path) {
      return;
    }
    const disk = await this.contents.get(path, { content: true, type: 'notebook' });
    const cells: Array<{ source: string | string[] }> = disk.content?.cells ?? [];
    cells.forEach((cell, i) => {
      const source = Array.isArray(cell.source) ? cell.source.join('') : cell.source;
      const open = i < model.cells.length ? model.cells.get(i) : null;
      if (
        open &&
        source.startsWith('%decide') &&
        open.sharedModel.getSource().startsWith('%decide') &&
        open.sharedModel.getSource() !== source
      ) {
        open.sharedModel.setSource(source);
      }
    });
  }

  private async rerun(step: string): Promise<void> {
    const asked = await InputDialog.getText({
      title: `Run ${step} again, and what depends on it`,
      label: 'Why? (recorded with the run, as `stepstone rerun --why`)',
      okLabel: 'Run again'
    });
    if (asked.button.accept && asked.value && asked.value.trim()) {
      await this.run('rerun', { step, why: asked.value, downstream: true });
    }
  }

  private async finishRun(): Promise<void> {
    const asked = await showDialog({
      title: 'Finish the run',
      body: 'Its summary is committed and the run is tagged; a finished run is not run again (reopen it to change it).',
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Finish' })]
    });
    if (asked.button.accept) {
      await this.run('finish', {});
    }
  }

  private draw(path: string, shown: IRunView): void {
    const parts: Node[] = [
      el('h2', {}, 'stepstone'),
      el(
        'p',
        { class: 'stepstone-run' },
        shown.run ? `run ${shown.run}` : 'no run yet',
        ` · ${path}`
      ),
      el('p', { class: 'stepstone-next' }, `next: ${shown.next_action}`)
    ];
    if (this.error) {
      parts.push(el('p', { class: 'stepstone-error' }, this.error));
    }
    parts.push(this.plan(shown), this.decisions(shown), this.unknowns(shown));
    parts.push(this.effects(shown), this.timeline(shown));
    if (shown.run && !shown.finished) {
      const finish = el('button', { class: 'stepstone-finish' }, 'Finish the run');
      finish.onclick = () => void this.finishRun();
      parts.push(el('section', {}, finish));
    }
    this.node.replaceChildren(...parts);
  }

  private plan(shown: IRunView): HTMLElement {
    const rows = shown.cells
      .filter(c => c.step)
      .map(c => {
        const again = el('button', { class: 'stepstone-rerun' }, 're-run');
        again.title = `run ${c.step} and what depends on it again`;
        again.onclick = () => void this.rerun(c.step ?? '');
        return el(
          'tr',
          { 'data-step': c.step ?? '' },
          el(
            'td',
            {},
            el('div', {}, `${c.step} `, badge(c.state ?? 'pending', c.reason)),
            c.reason ? el('div', { class: 'stepstone-reason' }, c.reason) : ''
          ),
          el('td', { class: 'stepstone-act' }, shown.run ? again : '')
        );
      });
    return el(
      'section',
      { class: 'stepstone-plan' },
      el('h3', {}, 'Plan'),
      el('table', {}, ...rows)
    );
  }

  private decisions(shown: IRunView): HTMLElement {
    const items = shown.decisions.map(d => {
      const revise = el('button', { class: 'stepstone-revise' }, 'revise');
      const value = box('new value', () => revise);
      const why = box('why', () => revise);
      revise.onclick = () =>
        void this.run('decide', {
          key: d.key,
          value: value.value,
          why: why.value,
          revise: true
        });
      const earlier = d.history
        .slice(0, -1)
        .map(r => el('li', {}, `${r.value} — ${r.why} (${when(r.time)})`));
      return el(
        'li',
        { 'data-key': d.key },
        el('code', {}, `${d.key} = ${d.value}`),
        d.why ? ` — ${d.why}` : '',
        earlier.length
          ? el('div', { class: 'stepstone-quiet' }, 'before:', el('ul', { class: 'stepstone-history' }, ...earlier))
          : '',
        el('div', {}, value, why, revise)
      );
    });
    return el(
      'section',
      { class: 'stepstone-decisions' },
      el('h3', {}, 'Decisions'),
      items.length ? el('ul', {}, ...items) : el('p', {}, 'none recorded')
    );
  }

  private unknowns(shown: IRunView): HTMLElement {
    const items = shown.unknowns.map(u => {
      const open = u.state === 'open';
      const send = el(
        'button',
        { class: open ? 'stepstone-answer' : 'stepstone-reanswer' },
        open ? 'answer' : 'revise'
      );
      const answer = box(open ? 'answer' : 'new answer', () => send);
      const why = box('why', () => send);
      send.onclick = () => {
        if (!answer.value.trim()) {
          answer.placeholder = 'type the answer first';
          answer.classList.add('stepstone-missing');
          answer.focus();
          return;
        }
        void this.run('answer', {
          unknown: u.id,
          text: answer.value,
          why: why.value,
          revise: !open
        });
      };
      const said = open
        ? `${u.id}: ${u.question}`
        : `${u.id}: ${u.question} — ${u.answer ?? ''}${u.why ? ` (${u.why})` : ''}`;
      return el(
        'li',
        { 'data-unknown': u.id, 'data-state': u.state },
        said,
        el('div', {}, answer, why, send)
      );
    });
    // the open ones first: they are what is asked
    items.sort(
      (a, b) =>
        Number(a.dataset.state !== 'open') - Number(b.dataset.state !== 'open')
    );
    return el(
      'section',
      { class: 'stepstone-unknowns' },
      el('h3', {}, 'Unknowns'),
      items.length ? el('ul', {}, ...items) : el('p', {}, 'none asked')
    );
  }

  private effects(shown: IRunView): HTMLElement {
    const items = shown.effects.map(e => {
      const settle = e.next_action
        ? ` — ${e.next_action}`
        : e.state === 'unresolved'
          ? ` — settle it: stepstone resolve ${e.key} --happened (or --not-happened)`
          : '';
      return el(
        'li',
        { 'data-state': String(e.state) },
        el('code', {}, String(e.key)),
        ` ${e.state} (step ${e.step})${settle}`
      );
    });
    return el(
      'section',
      { class: 'stepstone-effects' },
      el('h3', {}, 'Effects'),
      items.length ? el('ul', {}, ...items) : el('p', {}, 'none')
    );
  }

  private timeline(shown: IRunView): HTMLElement {
    const rows = shown.timeline.map(t =>
      el(
        'li',
        {},
        el('span', { class: 'stepstone-quiet' }, `${t.time} UTC `),
        t.subject,
        t.by ? el('span', { class: 'stepstone-quiet' }, ` — ${t.by}`) : ''
      )
    );
    return el(
      'section',
      { class: 'stepstone-timeline' },
      el('h3', {}, 'Timeline'),
      el('ol', {}, ...rows)
    );
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'stepstone-labextension:plugin',
  description: "Each step cell's state, and a panel to read and steer the run",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    const badges = new Map<NotebookPanel, Badges>();
    tracker.widgetAdded.connect((_, panel) => {
      const kept = new Badges(panel);
      badges.set(panel, kept);
      panel.disposed.connect(() => badges.delete(panel));
      // a cell run in this kernel shows `running` at once, and its result soon after
      panel.content.model?.cells.changed.connect(() => kept.draw());
      panel.sessionContext.statusChanged.connect(() => {
        kept.draw();
        void kept.refresh();
      });
    });
    const panel = new RunPanel(tracker, app.serviceManager.contents);
    app.shell.add(panel, 'left', { rank: 900 });
    app.commands.addCommand(OPEN_PANEL, {
      label: 'stepstone: open the run panel',
      execute: () => {
        app.shell.activateById(PANEL_ID);
        void panel.refresh();
      }
    });
    palette?.addItem({ command: OPEN_PANEL, category: 'stepstone' });
  }
};

export default plugin;
