// Preact with htm: `html` tagged templates instead of JSX, so the browser runs the files as they are.
import { Component, h, render } from "../vendor/preact.mjs";
import htm from "../vendor/htm.mjs";

export const html = htm.bind(h);
export { Component, render };
export { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from "../vendor/hooks.mjs";
