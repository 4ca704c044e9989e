/**
 * Images pasted or dropped into the chat's input: each shows as a thumbnail (with ✕) above the
 * input and goes with the next message as the contract's `images` ({mimeType, data} in base64).
 */
import type { PromptImage } from '../../bridge/protocol';

const TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);
/** The contract's bounds: 8 images, 16 MiB of base64 each. */
const MAX_IMAGES = 8;
const MAX_BASE64 = 16 * 1024 * 1024;

export interface ImageTray {
  /** The images waiting, taken for a message (the tray empties). */
  take(): PromptImage[];
}

function readImage(file: File): Promise<PromptImage | null> {
  return new Promise((resolve) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = typeof reader.result === 'string' ? reader.result : '';
      const data = url.slice(url.indexOf(',') + 1);
      resolve(data.length <= MAX_BASE64 ? { mimeType: file.type as PromptImage['mimeType'], data } : null);
    };
    reader.onerror = () => resolve(null);
    reader.readAsDataURL(file);
  });
}

export function imageTray(input: HTMLTextAreaElement, announce: (text: string) => void): ImageTray {
  const tray = document.createElement('div');
  tray.id = 'images';
  tray.className = 'images';
  tray.setAttribute('aria-label', 'Images for the next message');
  input.before(tray);
  let images: PromptImage[] = [];

  const render = (): void => {
    tray.replaceChildren(
      ...images.map((image, index) => {
        const item = document.createElement('span');
        item.className = 'image-chip';
        const img = document.createElement('img');
        img.src = `data:${image.mimeType};base64,${image.data}`;
        img.alt = `pasted image ${index + 1}`;
        const remove = document.createElement('button');
        remove.className = 'chip-remove';
        remove.textContent = '✕';
        remove.setAttribute('aria-label', `Remove image ${index + 1}`);
        remove.addEventListener('click', () => {
          images.splice(index, 1);
          render();
        });
        item.append(img, remove);
        return item;
      }),
    );
  };

  const add = async (files: File[]): Promise<void> => {
    const wanted = files.filter((f) => TYPES.has(f.type));
    for (const file of wanted) {
      if (images.length >= MAX_IMAGES) {
        announce(`at most ${MAX_IMAGES} images go with a message`);
        break;
      }
      const image = await readImage(file);
      if (image) {
        images.push(image);
      } else {
        announce(`${file.name || 'the image'} is too large to send`);
      }
    }
    render();
    if (wanted.length > 0) {
      announce(`${images.length} image(s) will go with the next message`);
    }
  };

  const filesOf = (data: DataTransfer | null): File[] => [...(data?.files ?? [])];
  input.addEventListener('paste', (event) => {
    const files = filesOf(event.clipboardData);
    if (files.some((f) => TYPES.has(f.type))) {
      event.preventDefault();
      void add(files);
    }
  });
  const zone = input.parentElement ?? input;
  zone.addEventListener('dragover', (event) => {
    if ([...(event.dataTransfer?.items ?? [])].some((i) => i.kind === 'file')) {
      event.preventDefault();
    }
  });
  zone.addEventListener('drop', (event) => {
    const files = filesOf(event.dataTransfer);
    if (files.length > 0) {
      event.preventDefault();
      void add(files);
    }
  });

  return {
    take() {
      const taken = images;
      images = [];
      render();
      return taken;
    },
  };
}
