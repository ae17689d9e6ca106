// Commands as written: the form's text to the argv the API takes, and an argv back to text as a
// shell would read it.

// Characters a word may hold without quotes in a POSIX shell.
const PLAIN = /^[A-Za-z0-9_@%+=:,./-]+$/;

export function shellQuote(word: string): string {
  if (PLAIN.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

// A `sh -c SCRIPT` (or bash) command: the script, as written; null for any other command.
export function shellScript(argv: string[]): { shell: string; script: string; args: string[] } | null {
  if (argv.length >= 3 && /^(\/bin\/|\/usr\/bin\/)?(ba)?sh$/.test(argv[0]) && argv[1] === '-c') {
    return { shell: argv[0], script: argv[2], args: argv.slice(3) };
  }
  return null;
}

export function argvToText(argv: string[]): string {
  return argv.map(shellQuote).join(' ');
}

// What the shell would do for one line of plain words ("python train.py --lr '1e-3'"): its argv.
// Anything a shell would interpret (pipes, redirections, variables, globs, several lines, a
// comment) makes it a script for `sh -c`, run as written.
export function textToArgv(text: string): string[] {
  const trimmed = text.trim();
  if (!trimmed) return [];
  const words: string[] = [];
  let word = '';
  let inWord = false;
  for (let i = 0; i < trimmed.length; i++) {
    const c = trimmed[i];
    if (c === "'") {
      const end = trimmed.indexOf("'", i + 1);
      if (end < 0) return ['sh', '-c', text];
      word += trimmed.slice(i + 1, end);
      inWord = true;
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      let part = '';
      for (; j < trimmed.length && trimmed[j] !== '"'; j++) {
        if ('$`'.includes(trimmed[j])) return ['sh', '-c', text];
        if (trimmed[j] === '\\' && j + 1 < trimmed.length && '"\\'.includes(trimmed[j + 1])) j++;
        part += trimmed[j];
      }
      if (j >= trimmed.length) return ['sh', '-c', text];
      word += part;
      inWord = true;
      i = j;
    } else if (c === ' ' || c === '\t') {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else if ('\n\r|&;<>()$`\\*?[#~{}!'.includes(c)) {
      return ['sh', '-c', text];
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}
